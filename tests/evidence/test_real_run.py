"""A real `acklab run` (a subprocess, as CI runs it): its evidence validates, verifies, replays,
and no planted secret reaches a single byte of its output.

Written against the contract for `acklab run --json` (docs/verdicts.md); it needs the harness's `acklab run`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from acklab.evidence.bundle import find_bundles, verify
from acklab.evidence.validate import validate

# One real `acklab run` of the default experiments, shared by the module: seconds.
pytestmark = pytest.mark.slow

SECRET_KEY = b"acklab-planted-key-0001!"  # 24 bytes, like a Standard Webhooks key
PLANTED = {
    "ACKLAB_WEBHOOK_SECRET": "whsec_" + base64.b64encode(SECRET_KEY).decode(),
    "GITLAB_TOKEN": "glpat-plantedTokenValue0123",
    "CI_JOB_TOKEN": "glcbt-plantedJobTokenValue0123",
    "OPENAI_API_KEY": "sk-plantedApiKeyValue0123456789",
    "SHOP_WEBHOOK_SECRET": "plantedShopSecretValue0123",
}


def needles() -> dict[str, bytes]:
    """Every planted value, and the forms of the webhook key a leak could take."""
    found = {name: value.encode() for name, value in PLANTED.items()}
    found["webhook key (base64)"] = base64.b64encode(SECRET_KEY)
    found["webhook key (raw)"] = SECRET_KEY
    found["webhook key (hex)"] = SECRET_KEY.hex().encode()
    return found


def acklab_executable() -> str:
    beside = Path(sys.executable).with_name("acklab")
    return str(beside) if beside.exists() else (shutil.which("acklab") or "acklab")


def run_acklab(workdir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`acklab ARGS` as CI runs it: a subprocess, planted secrets in its environment, no CI_ variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CI_")} | PLANTED
    return subprocess.run(
        [acklab_executable(), *args], cwd=workdir, env=env, capture_output=True, timeout=300, check=False
    )


def leaks(workdir: Path, *procs: subprocess.CompletedProcess[bytes]) -> list[str]:
    """Every planted secret found in the processes' output or any file under `workdir`."""
    outputs = {
        f"{name} of run {n}": getattr(p, name) for n, p in enumerate(procs) for name in ("stdout", "stderr")
    }
    for path in sorted(workdir.rglob("*")):
        if path.is_file():  # every file the run left: bundles, journal (and its WAL), databases
            outputs[str(path.relative_to(workdir))] = path.read_bytes()
    assert len(outputs) > 3
    return [
        f"{what} in {where}"
        for where, data in outputs.items()
        for what, needle in needles().items()
        if needle in data
    ]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("real-run")
    proc = run_acklab(workdir, "run", "--target", "fixture:live", "--trials", "1", "--out", "out", "--json")
    return workdir, proc


def test_the_run_answers_the_json_contract(real_run):
    workdir, proc = real_run
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")[-3000:]
    result = json.loads(proc.stdout)
    assert result["verdict"] in ("pass", "fail", "error")
    assert result["target"] == "fixture:live"
    assert result["experiments"]
    bundle = (
        workdir / result["bundle"] if not Path(result["bundle"]).is_absolute() else Path(result["bundle"])
    )
    assert (bundle / "manifest.json").is_file()


def test_no_planted_secret_reaches_any_byte_of_the_output(real_run):
    workdir, proc = real_run
    assert leaks(workdir, proc) == []


def test_every_file_of_the_bundle_validates_and_verifies(real_run, acklab):
    workdir, _ = real_run
    bundles = find_bundles(workdir / "out")
    assert bundles
    kinds = {"run.json": "run", "manifest.json": "manifest", "trail.json": "trail"}
    for bundle in bundles:
        assert verify(bundle).ok, verify(bundle).describe()
        for path in sorted(bundle.rglob("*")):
            rel = path.relative_to(bundle).as_posix()
            if rel in kinds:
                validate(kinds[rel], json.loads(path.read_text()), what=rel)
            elif rel.startswith(("incidents/", "trials/")) and rel.endswith(".json"):
                validate(rel.split("/")[0].removesuffix("s"), json.loads(path.read_text()), what=rel)
            elif rel.endswith(".xml"):
                ET.fromstring(path.read_bytes())
    code, _, _ = acklab("evidence", "verify", workdir / "out")
    assert code == 0


def test_history_replays_the_run(real_run, acklab):
    workdir, proc = real_run
    run_id = json.loads(proc.stdout)["run_id"]
    code, out, _ = acklab("history", run_id, "--evidence", workdir / "out", "--json")
    assert code == 0
    kinds = {entry["kind"] for entry in json.loads(out)}
    assert {"run", "trial"} <= kinds


def test_a_one_byte_change_fails_verification_naming_the_file(real_run, acklab, tmp_path):
    workdir, _ = real_run
    copy = tmp_path / "copy"
    shutil.copytree(workdir / "out", copy)
    [bundle] = [b for b in find_bundles(copy) if (b / "run.json").is_file()][:1]
    target = next(p for p in sorted((bundle / "trials").glob("*.json")))
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    code, out, _ = acklab("evidence", "verify", bundle)
    assert code == 7
    assert f"changed: trials/{target.name}" in out
