"""Hostile input (docs/hostile-input.md): `evidence pull` is all or nothing, and bounded per archive and per pull.

Against the GitLab API double (a real HTTP server speaking GitLab's routes): two bundles that
would be stored under one name, an archive over the cap (listed honestly, and one whose size
is listed falsely and grows while streaming), two archives that together pass the pull's cap,
and a failure while moving bundles into place — each stores nothing and exits 7 (or 4).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import verify
from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401 - a fixture, used by name
from tests.evidence.factories import write_run_bundle


def archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def bundle_files(tmp_path: Path, run_id: str, *, prefix: str, pad: int = 0) -> dict[str, bytes]:
    root = write_run_bundle(tmp_path / "src" / prefix / run_id, run_id, {"lost-ack": [(0, "pass")]})
    files = {
        f"{prefix}/{run_id}/{p.relative_to(root).as_posix()}": p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
    }
    if pad:
        files[f"{prefix}/padding.bin"] = os.urandom(pad)  # incompressible, outside any bundle
    return files


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, gitlab_double: Any) -> Any:  # noqa: F811
    for name in ("GITLAB_URL", "CI_SERVER_URL", "GITLAB_TOKEN", "CI_JOB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITLAB_URL", gitlab_double.url)
    monkeypatch.setenv("GITLAB_TOKEN", gitlab_double.private_token)
    return gitlab_double


def pipeline_with(double: Any, *archives: bytes) -> int:
    project = double.state.add_project("acme/shop", id=42)
    pipe = double.state.add_pipeline(project)
    for n, data in enumerate(archives, start=1):
        double.state.add_job(pipe, f"run-{n}", artifacts=data)
    return int(pipe.id)


def pull(acklab: Any, out: Path, pipeline: int, *extra: object) -> tuple[int, str]:
    code, _, err = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipeline, "--out", out, *extra
    )
    return code, err


def stored(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file()] if out.exists() else []


def test_two_bundles_under_one_name_store_nothing(tmp_path, env, acklab):
    files = {**bundle_files(tmp_path, "r1", prefix="out/a"), **bundle_files(tmp_path, "r1", prefix="out/b")}
    good = archive(bundle_files(tmp_path, "r2", prefix="out"))
    pipeline = pipeline_with(env, good, archive(files))
    out = tmp_path / "pulled"
    code, err = pull(acklab, out, pipeline)
    assert code == 7, err
    assert "holds two bundles named 'r1'" in err
    assert "nothing was stored" in err
    assert stored(out) == []


def test_an_archive_over_the_cap_is_never_downloaded(tmp_path, env, acklab):
    pipeline = pipeline_with(env, archive(bundle_files(tmp_path, "r1", prefix="out", pad=(1 << 20) + 1)))
    out = tmp_path / "pulled"
    code, err = pull(acklab, out, pipeline, "--max-archive-mib", "1")
    assert code == 7, err
    assert "nothing was downloaded" in err
    assert stored(out) == []


def test_an_archive_that_lies_about_its_size_is_abandoned_while_streaming(tmp_path, env, acklab, monkeypatch):
    import tests.doubles.gitlab.ci as ci

    real = ci.job_json

    def lying(*args: Any) -> dict[str, Any]:
        found = real(*args)
        for artifact in found["artifacts"]:
            artifact["size"] = 10  # says ten bytes; streams two megabytes
        return found

    monkeypatch.setattr(ci, "job_json", lying)
    pipeline = pipeline_with(env, archive(bundle_files(tmp_path, "r1", prefix="out", pad=2 << 20)))
    out = tmp_path / "pulled"
    code, err = pull(acklab, out, pipeline, "--max-archive-mib", "1")
    assert code == 7, err
    assert "grew past 1,048,576 bytes while downloading; abandoned" in err
    assert stored(out) == []
    assert not [p for p in out.iterdir() if p.name.startswith(".pull-")]  # the staging area is gone


def test_the_pull_as_a_whole_is_capped(tmp_path, env, acklab):
    first = archive(bundle_files(tmp_path, "r1", prefix="out", pad=700_000))
    second = archive(bundle_files(tmp_path, "r2", prefix="out", pad=700_000))
    pipeline = pipeline_with(env, first, second)
    out = tmp_path / "pulled"
    code, err = pull(acklab, out, pipeline, "--max-archive-mib", "1", "--max-total-mib", "1")
    assert code == 7, err
    assert "nothing was" in err
    assert stored(out) == []
    code, err = pull(acklab, out, pipeline, "--max-archive-mib", "1", "--max-total-mib", "2")
    assert code == 0, err  # within the caps, the same pipeline pulls
    assert all(verify(p.parent).ok for p in out.rglob("manifest.json"))


def test_a_failure_while_storing_takes_back_what_was_moved(tmp_path, env, acklab, monkeypatch):
    first = archive(bundle_files(tmp_path, "r1", prefix="out"))
    second = archive(bundle_files(tmp_path, "r2", prefix="out"))
    pipeline = pipeline_with(env, first, second)
    real_rename = Path.rename
    moved: list[Path] = []

    def flaky(self: Path, target: Any) -> Path:
        if Path(target).name == "r2" and ".pull-" not in str(target):
            raise OSError(28, "No space left on device")
        moved.append(Path(target))
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", flaky)
    out = tmp_path / "pulled"
    code, err = pull(acklab, out, pipeline)
    assert code == 4, err
    assert "No space left on device" in err
    assert any(p.name == "r1" for p in moved)  # r1 had been moved into place ...
    assert stored(out) == []  # ... and was taken back
