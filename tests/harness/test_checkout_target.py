"""``--checkout DIR``: the fixture of another checkout, served by its own processes, judged from here.

The checkouts are small copies of the project (acklab/ and app/ beside a pyproject.toml)
whose app/webhooks.py is what the test says. The lab runs in this test's process and must
never import them: a handler that rewrites the verdict code through ``sys.modules`` at
import time does it in the server's process, and the verdicts here stay what they are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from acklab.evidence.exitcodes import ExitCode
from acklab.flows.lab import imported_from
from acklab.flows.sandbox import choose
from acklab.harness.core.verdicts import Judgement
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.targets import resolve_target

ROOT = Path(__file__).resolve().parents[2]
FLOW_EXPERIMENTS = ("lost-ack", "concurrent-duplicates", "conflicting-payload", "timeout-overlap")
# Import-time code of a hostile handler: silence the lab's verdicts if it can find them, and
# say where it ran and what it could see.
HOSTILE = """
import json as _json
import os as _os
import sys as _sys
from pathlib import Path as _Path

for _name, _module in list(_sys.modules.items()):
    if _name.endswith("harness.core.verdicts"):
        _module.Judgement.violate = lambda *_args, **_kwargs: None
_Path(__file__).with_name("ran-in.json").write_text(
    _json.dumps({"pid": _os.getpid(), "uid": _os.getuid(), "file": __file__, "env": sorted(_os.environ),
                 "harness": any("harness" in n for n in _sys.modules)})
)
"""


class Keeping:
    """The sandbox, keeping what the served code wrote beside its handler before each copy goes."""

    def __init__(self, into: Path) -> None:
        self.inner, self.into = choose(), into
        self.name, self.own_network = self.inner.name, self.inner.own_network

    def describe(self) -> str:
        return self.inner.describe()

    def prepare(self, checkout: Path, *, label: str):
        place = self.inner.prepare(checkout, label=label)
        close, into = place.close, self.into

        def keep() -> None:
            written = place.root / "app" / "ran-in.json"
            if written.is_file():
                into.write_bytes(written.read_bytes())
            close()

        place.close = keep  # type: ignore[method-assign]  # the place the sandbox made, kept a moment longer
        return place


def checkout(where: Path, handler: str) -> Path:
    """A copy of the project's fixture whose app/webhooks.py is `handler`."""
    for folder in ("acklab", "app"):
        shutil.copytree(ROOT / folder, where / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (where / "harness").mkdir()
    (where / "harness" / "__init__.py").write_text("")
    shutil.copy2(ROOT / "pyproject.toml", where / "pyproject.toml")
    (where / "app" / "webhooks.py").write_text(handler)
    return where


@pytest.mark.slow
def test_a_hostile_handler_served_from_its_checkout_cannot_reach_the_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-never-for-the-handler")
    violate = Judgement.violate
    unsafe = (ROOT / "app" / "unsafe.py").read_text()
    copy = checkout(tmp_path / "hostile", unsafe + HOSTILE)
    kept = tmp_path / "ran-in.json"
    result = run(
        RunOptions(
            target="fixture:live",
            checkout=copy,
            experiments=FLOW_EXPERIMENTS,
            trials=1,
            out=tmp_path / "out",
            confinement=Keeping(kept),
        )
    )
    verdicts = {e["name"]: e["verdict"] for e in result.run["experiments"]}
    assert verdicts == dict.fromkeys(FLOW_EXPERIMENTS, "fail")
    assert int(result.exit_code) == ExitCode.VERDICT_FAILED
    # the lab never imported the checkout, and its verdict code is untouched
    assert imported_from(copy) == []
    assert Judgement.violate is violate
    # the hostile code did run: in a process of its own, in a private copy of the checkout (never
    # the checkout itself), without the lab's harness or tokens
    assert not (copy / "app" / "ran-in.json").exists()
    ran = json.loads(kept.read_text())
    assert not ran["file"].startswith(str(copy))
    assert ran["harness"] is False
    assert "GITLAB_TOKEN" not in ran["env"]
    assert "ACKLAB_WEBHOOK_SECRET" in ran["env"]
    trial = json.loads(next((result.bundle / "trials").glob("lost-ack-*.json")).read_text())
    assert trial["deliveries"][0]["status"] == 200  # answered over the socket, then lost on purpose


@pytest.mark.slow
def test_the_live_handler_served_from_a_checkout_passes_the_flows_experiments(tmp_path):
    copy = checkout(tmp_path / "live", (ROOT / "app" / "webhooks.py").read_text())
    result = run(
        RunOptions(
            target="fixture:live",
            checkout=copy,
            experiments=FLOW_EXPERIMENTS,
            trials=1,
            out=tmp_path / "out",
            confinement=choose(),
        )
    )
    verdicts = {e["name"]: e["verdict"] for e in result.run["experiments"]}
    assert verdicts == dict.fromkeys(FLOW_EXPERIMENTS, "pass")
    incident = json.loads((result.bundle / result.run["experiments"][0]["incident"]).read_text())
    assert str(copy) in incident["target"]["endpoint"]
    assert "over a real loopback socket" in incident["boundary"]  # even lost-ack: no in-process ASGI


def test_a_checkout_whose_handler_would_come_from_elsewhere_is_not_served(tmp_path):
    copy = checkout(tmp_path / "elsewhere", (ROOT / "app" / "webhooks.py").read_text())
    # Without the checkout's own acklab/__init__.py, `acklab.app` would be the installed one: refused,
    # or (a namespace that mounts nothing of the lab's checkout) not found at all.
    (copy / "acklab" / "__init__.py").write_text("")
    elsewhere = r"refused: the (live handler|models) would come from|No module named 'acklab\.app'"
    with pytest.raises(HarnessError, match=elsewhere) as info:
        run(
            RunOptions(
                target="fixture:live",
                checkout=copy,
                experiments=("lost-ack",),
                trials=1,
                out=tmp_path / "out",
                confinement=choose(),
            )
        )
    assert info.value.exit_code == ExitCode.LAB_ERROR


def test_checkout_needs_an_acklab_checkout_or_a_spec_file_of_the_checkout(tmp_path):
    with pytest.raises(SpecError, match="is not an acklab checkout"):
        resolve_target("fixture:live", checkout=tmp_path)
    # A target spec is served from the checkout it belongs to (tests/flows/test_user_repair.py).
    with pytest.raises(SpecError, match="the spec must be a file of the checkout"):
        resolve_target(str(tmp_path / "shop.yaml"), checkout=ROOT)
    with pytest.raises(SpecError, match="no such file in the checkout"):
        resolve_target("shop.yaml", checkout=tmp_path)


def test_a_checkout_is_not_served_without_a_confinement(tmp_path, monkeypatch):
    from acklab.harness.procs import confinement

    monkeypatch.setattr(confinement, "_PROVIDER", [])
    copy = checkout(tmp_path / "live", (ROOT / "app" / "webhooks.py").read_text())
    with pytest.raises(confinement.ConfinementUnavailable, match="no confinement is installed") as info:
        run(
            RunOptions(
                target="fixture:live",
                checkout=copy,
                experiments=("lost-ack",),
                trials=1,
                out=tmp_path / "out",
            )
        )
    assert info.value.exit_code == ExitCode.REFUSED
