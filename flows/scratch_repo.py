"""`acklab flow sandbox DIR`: a scratch repository in which anyone can watch the flow repair a handler.

Not the sandbox untrusted code runs in (that is `flows.sandbox`): this module only makes the
repository the demo and the tests repair.

DIR becomes a git repository holding a copy of the project (every file `git ls-files` lists
in the current checkout, as committed at its HEAD: a consistent snapshot, not half-edited
work) whose `app/webhooks.py` is the reference unsafe handler, committed.
Then: `cd DIR && acklab flow run flows/repair.yaml --local`.

The copy is of acklab's own source checkout: the fixture, its tests (the verify step runs
them) and `flows/repair.yaml`. An acklab installed from a wheel holds none of that, so there
the command says it needs a checkout, and how to get one (exit 4).
"""

from __future__ import annotations

import io
import shutil
import subprocess  # nosec B404
import tarfile
from pathlib import Path

from .errors import FlowError, FlowSpecInvalid
from .worktree import FLOW_IDENTITY, git, head_sha, toplevel

HANDLER = "app/webhooks.py"
UNSAFE = "app/unsafe.py"


# What a source checkout of acklab holds at its root and an installed package does not.
CHECKOUT_MARKERS = ("pyproject.toml", "flows/repair.yaml", HANDLER, UNSAFE, "tests")
NEEDS_CHECKOUT = (
    "acklab flow sandbox copies acklab's own source checkout (the fixture, its tests and "
    "flows/repair.yaml), and this acklab runs from an installed package ({where}), which holds "
    "none of them. Clone the acklab repository, install it from there (pip install -e .) and run "
    "`acklab flow sandbox DIR` from the clone."
)


def project_root(package: Path | None = None) -> Path:
    """The checkout this acklab runs from (the parent of the `flows` package); FlowError (exit 4)
    when it runs from an installed package instead."""
    package = package or Path(__file__).resolve().parent
    root = package.parent
    if not all((root / marker).exists() for marker in CHECKOUT_MARKERS):
        raise FlowError(NEEDS_CHECKOUT.format(where=root))
    return toplevel(package)


def make_scratch_repo(target: Path, *, source: Path | None = None) -> str:
    """Create the sandbox at `target` (absent or empty); return the sandbox's head sha."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FlowSpecInvalid(
            f"{str(target)!r} exists and is not an empty directory; pass a new or empty directory "
            "(nothing was changed)"
        )
    source = toplevel(source) if source is not None else project_root()
    listed = set(git(source, "ls-files", "-z").stdout.split("\0")) - {""}
    for required in (HANDLER, UNSAFE):
        if required not in listed:
            raise FlowError(f"{source} has no tracked {required}; the sandbox needs both handlers")
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
        _extract_head(source, target)
        shutil.copy2(target / UNSAFE, target / HANDLER)
        git(target, "init", "--quiet", "--initial-branch=main")
        git(target, "add", "--all", "--force")
        message = (
            "Sandbox: the live handler is the unsafe one\n\n"
            f"A copy of {source.name} whose {HANDLER} is {UNSAFE}: every retried, lost-ack or "
            "duplicated delivery adds a fulfillment. Repair it with:\n"
            "  acklab flow run flows/repair.yaml --local\n"
        )
        git(target, "commit", "--quiet", "--no-verify", "-m", message, env=dict(FLOW_IDENTITY))
    except BaseException:
        _undo(target, created)
        raise
    return head_sha(target)


def _extract_head(source: Path, target: Path) -> None:
    """Write the committed tree of `source`'s HEAD into `target` (git archive, read as a tar)."""
    archive = subprocess.run(  # nosec B603 B607
        ["git", "-C", str(source), "archive", "--format=tar", "HEAD"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise FlowError(f"`git archive HEAD` failed in {source}: {archive.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")


def _undo(target: Path, created: bool) -> None:
    """Leave `target` as it was: removed when we created it, emptied when it was empty."""
    if created:
        shutil.rmtree(target, ignore_errors=True)
        return
    for child in target.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
