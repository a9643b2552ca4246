"""The programs a flow runs besides the code under repair, found before anything is asked of a model.

The scope guard runs ruff with the lab's interpreter on every proposal; verify runs each of the
spec's ``verify.commands`` (``python`` is the lab's interpreter, as `checks.run_checks` starts
it). A tool missing there used to surface only after the model had been paid for a proposal —
as a guard refusal with an empty reason, or a check failing with exit 127. `missing` names each
one before the flow reproduces anything, with the interpreter it was looked for in and the fix.
The interpreter itself is asked (isolated, ``-I``) which modules it can find; nothing is imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess  # nosec B404
import sys

from .errors import FlowError
from .spec import FlowSpec

# What the guard runs itself on every proposal (`guard._python_rules`).
GUARD_TOOLS = ("ruff",)
_FIND = "import importlib.util, sys\nfor m in sys.argv[1:]:\n    print(m) if importlib.util.find_spec(m) is None else None\n"
PROBE_TIMEOUT_S = 60


def missing_modules(python: str, modules: list[str]) -> set[str]:
    """The top-level `modules` the interpreter `python` cannot find."""
    if not modules:
        return set()
    try:
        done = subprocess.run(  # nosec B603
            [python, "-I", "-c", _FIND, *modules],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FlowError(f"could not ask the interpreter {python} which tools it has: {exc}") from exc
    if done.returncode != 0:
        raise FlowError(
            f"could not ask the interpreter {python} which tools it has: {done.stderr.strip()[-500:]}"
        )
    return set(done.stdout.split())


def missing(spec: FlowSpec, *, verifying: bool = True, python: str = sys.executable) -> list[str]:
    """Why each tool the flow will run cannot be found (empty: every one is there). `verifying`:
    the flow will verify (not --propose-only), so the spec's verify commands count too; `python`:
    the interpreter the guard and verify's ``python`` run (the lab's own)."""
    commands = spec.verify if verifying else ()
    modules = {
        c.argv[2].split(".", 1)[0]: c for c in commands if c.argv[:2] == ("python", "-m") and len(c.argv) > 2
    }
    absent = missing_modules(python, sorted({*GUARD_TOOLS, *modules}))
    problems = [
        f"the scope guard runs 'python -m {tool}' on every proposal, and {tool} is not installed for the "
        f"lab's interpreter ({python}); install it there (pip install {tool})"
        for tool in GUARD_TOOLS
        if tool in absent
    ]
    problems += [
        f"verify command {command.name!r} runs 'python -m {module}', and {module} is not installed for the "
        f"interpreter verify runs ({python}); install it there (pip install {module}) or change "
        f"verify.commands in {spec.path}"
        for module, command in modules.items()
        if module in absent
    ]
    problems += [
        f"verify command {command.name!r} runs {command.argv[0]!r}, which is not on PATH; install it or "
        f"change verify.commands in {spec.path}"
        for command in commands
        if command.argv[0] != "python" and shutil.which(command.argv[0], path=os.environ.get("PATH")) is None
    ]
    return problems
