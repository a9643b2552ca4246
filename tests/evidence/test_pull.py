import hashlib
import io
import json
import socket
import zipfile

import pytest

from acklab.evidence.bundle import verify
from tests.evidence.factories import write_run_bundle


def zip_tree(root, *, prefix="out", extra=()):
    """The artifact archive GitLab would store for `artifacts: paths: [out/]`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                zf.write(path, f"{prefix}/{path.relative_to(root).as_posix()}")
        for name, data in extra:
            zf.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def pipeline(tmp_path, gitlab_double):
    """A project with a sharded run: two jobs with bundles, a lint job and many jobs without artifacts."""
    state = gitlab_double.state
    project = state.add_project("acme/shop", id=42)
    pipe = state.add_pipeline(project)
    state.add_job(pipe, "lint")
    for n in (1, 2):
        evidence_dir = tmp_path / f"job{n}"
        write_run_bundle(
            evidence_dir / "r1",
            "r1",
            {"lost-ack": [(n - 1, "fail" if n == 2 else "pass")]},
            shard=f"{n}/2",
            env={"CI_PIPELINE_ID": str(pipe.id), "CI_JOB_ID": str(100 + n)},
        )
        (evidence_dir / "journal.sqlite").write_bytes(b"not part of any bundle")
        state.add_job(pipe, f"run: [{n}/2]", artifacts=zip_tree(evidence_dir))
    for n in range(25):  # more than one page of jobs
        state.add_job(pipe, f"noise-{n}", stage="build")
    return project, pipe


@pytest.fixture
def env(monkeypatch, gitlab_double):
    for name in ("GITLAB_URL", "CI_SERVER_URL", "GITLAB_TOKEN", "CI_JOB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITLAB_URL", gitlab_double.url)
    monkeypatch.setenv("GITLAB_TOKEN", gitlab_double.private_token)
    return monkeypatch


def all_bytes(root):
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_good_pipeline_is_pulled_verified_and_marked(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    out = tmp_path / "pulled"
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", out, "--json"
    )
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert sorted(r["job"] for r in rows) == ["run: [1/2]", "run: [2/2]"]
    for row in rows:
        bundle = out / f"pipeline-{pipe.id}" / f"run-{row['job'][6]}-2-{row['job_id']}" / "r1"
        assert row["bundle"] == str(bundle)
        assert verify(bundle).ok
        manifest = json.loads((bundle / "manifest.json").read_text())
        pulled = manifest["pulled_from"]
        assert pulled["gitlab_url"] == gitlab_double.url
        assert (pulled["project"], pulled["pipeline"], pulled["job"]) == (
            "acme/shop",
            str(pipe.id),
            row["job"],
        )
        assert pulled["verified"] is True
        assert pulled["pipeline_url"].endswith(f"/acme/shop/-/pipelines/{pipe.id}")
        assert manifest["ci"]["pipeline_id"] == str(pipe.id)
    assert not list(out.glob(".pull-*"))  # the staging area is gone
    # Only bundles are kept (no job's journal), and the local journal records each one pulled:
    # `verify --journal` believes a pulled_from only for a bundle this journal says pull stored.
    assert list(out.rglob("journal.sqlite")) == [out / "journal.sqlite"]
    code, stdout, _ = acklab("evidence", "verify", out, "--journal")
    assert code == 0, stdout
    token = gitlab_double.private_token.encode()
    assert token not in all_bytes(out)
    assert token.decode() not in stdout + stderr
    assert {r.auth for r in gitlab_double.state.requests} == {"private"}
    assert any("page=2" in r.query for r in gitlab_double.state.requests)  # walked the job pages

    # the pulled shards merge into one run
    code, stdout, _ = acklab("evidence", "merge", out / f"pipeline-{pipe.id}", "--out", tmp_path / "merged")
    assert code == 0
    run = json.loads((tmp_path / "merged/r1/run.json").read_text())
    assert (run["verdict"], run["status"], run["experiments"][0]["trials"]) == ("fail", "complete", 2)


def test_a_comparison_is_pulled_whole_with_its_runs_inside(tmp_path, gitlab_double, env, acklab):
    """A bundle nested in another (a comparison's runs) travels inside it, not as a bundle of its own."""
    from acklab.harness.engine.comparison import bundle_comparison
    from acklab.harness.engine.runner import RunResult

    runs = tmp_path / "runs"
    finished = []
    for run_id, verdict in (("before", "fail"), ("after", "pass")):
        root = write_run_bundle(runs / run_id, run_id, {"lost-ack": [(0, verdict)]})
        finished.append(RunResult.load(root))
    evidence_dir = tmp_path / "job"
    compared = bundle_comparison(
        evidence_dir, finished, seed=7, started_at="2026-12-01T00:00:00Z", targets=["a", "b"]
    )
    state = gitlab_double.state
    pipe = state.add_pipeline(state.add_project("acme/cmp", id=43))
    state.add_job(pipe, "compare", artifacts=zip_tree(evidence_dir))

    out = tmp_path / "pulled"
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/cmp", "--pipeline", pipe.id, "--out", out, "--json"
    )
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert [r["bundle"].rsplit("/", 1)[-1] for r in rows] == [compared.bundle.name]
    pulled = out / f"pipeline-{pipe.id}" / f"compare-{rows[0]['job_id']}" / compared.bundle.name
    assert verify(pulled).ok
    for run in finished:  # the runs inside are byte for byte what the job wrote
        inner = pulled / run.bundle.name / "manifest.json"
        assert inner.read_bytes() == (compared.bundle / run.bundle.name / "manifest.json").read_bytes()


def test_the_original_manifest_hash_is_kept(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    job = next(j for j in pipe.jobs if j.name == "run: [1/2]")
    with zipfile.ZipFile(io.BytesIO(job.artifacts)) as zf:
        original = zf.read("out/r1/manifest.json")
    code, _, _ = acklab(
        "evidence",
        "pull",
        "--project",
        "42",
        "--pipeline",
        pipe.id,
        "--job",
        "run: [1/2]",
        "--out",
        tmp_path / "o",
    )
    assert code == 0
    [bundle] = (tmp_path / "o").rglob("manifest.json")
    pulled = json.loads(bundle.read_text())["pulled_from"]
    assert pulled["original_manifest_sha256"] == hashlib.sha256(original).hexdigest()
    assert pulled["job_id"] == str(job.id)


def test_a_tampered_artifact_exits_7_and_nothing_is_stored(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    job = next(j for j in pipe.jobs if j.name == "run: [2/2]")
    source = io.BytesIO(job.artifacts)
    tampered = io.BytesIO()
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(tampered, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "out/r1/trials/lost-ack-0001.json":
                data = data.replace(b'"fail"', b'"pass"')
            zout.writestr(item, data)
    job.artifacts = tampered.getvalue()
    out = tmp_path / "pulled"
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", out
    )
    assert code == 7
    assert "changed: trials/lost-ack-0001.json" in stderr
    assert "run: [2/2]" in stderr
    assert "nothing was stored" in stderr
    assert stdout == ""
    assert list(out.rglob("*")) == []  # not even the intact shard, not even a quarantine copy


def test_an_archive_escaping_its_directory_is_refused(tmp_path, gitlab_double, env, acklab):
    state = gitlab_double.state
    pipe = state.add_pipeline(state.add_project("acme/evil"))
    state.add_job(pipe, "run", artifacts=zip_tree(tmp_path / "empty", extra=[("../../escape.txt", b"x")]))
    code, _, stderr = acklab(
        "evidence", "pull", "--project", "acme/evil", "--pipeline", pipe.id, "--out", tmp_path / "o"
    )
    assert code == 7
    assert "points outside the archive" in stderr
    assert not (tmp_path / "escape.txt").exists()
    assert list((tmp_path / "o").rglob("*")) == []


def test_an_archive_that_is_not_a_zip_is_an_integrity_failure(tmp_path, gitlab_double, env, acklab):
    state = gitlab_double.state
    pipe = state.add_pipeline(state.add_project("acme/broken"))
    state.add_job(pipe, "run", artifacts=b"PK\x03\x04 truncated")
    code, _, stderr = acklab(
        "evidence", "pull", "--project", "acme/broken", "--pipeline", pipe.id, "--out", tmp_path / "o"
    )
    assert code == 7
    assert "not a sound zip" in stderr


def test_a_rejected_token_exits_4_without_showing_it(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    env.setenv("GITLAB_TOKEN", "glpat-wrong-planted-value")
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", tmp_path / "o"
    )
    assert code == 4
    assert "rejected the token from GITLAB_TOKEN (401 Unauthorized)" in stderr
    assert "glpat-wrong-planted-value" not in stdout + stderr


@pytest.mark.parametrize(
    ("project", "pipeline_id", "message"),
    [
        ("acme/shop", 999999, "pipeline 999999 of project 'acme/shop' not found"),
        ("acme/nope", 1, "project 'acme/nope' not found"),
    ],
)
def test_a_missing_project_or_pipeline_is_named(
    tmp_path, gitlab_double, pipeline, env, acklab, project, pipeline_id, message
):
    code, _, stderr = acklab(
        "evidence", "pull", "--project", project, "--pipeline", pipeline_id, "--out", tmp_path / "o"
    )
    assert code == 3
    assert message in stderr


def test_an_unknown_job_name_lists_the_jobs(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    code, _, stderr = acklab(
        "evidence",
        "pull",
        "--project",
        "acme/shop",
        "--pipeline",
        pipe.id,
        "--job",
        "run",
        "--out",
        tmp_path / "o",
    )
    assert code == 3
    assert "no job named 'run'" in stderr
    assert "run: [1/2]" in stderr


def test_a_job_token_from_inside_a_pipeline_works(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    env.delenv("GITLAB_URL")
    env.delenv("GITLAB_TOKEN")
    env.setenv("CI_SERVER_URL", gitlab_double.url)
    env.setenv("CI_JOB_TOKEN", gitlab_double.job_token)
    code, _, stderr = acklab(
        "evidence", "pull", "--project", "42", "--pipeline", pipe.id, "--out", tmp_path / "o"
    )
    assert code == 0, stderr
    assert {r.auth for r in gitlab_double.state.requests} == {"job"}
    assert len(list((tmp_path / "o").rglob("manifest.json"))) == 2


def test_pulling_twice_never_overwrites(tmp_path, gitlab_double, pipeline, env, acklab):
    _, pipe = pipeline
    args = ("evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", tmp_path / "o")
    assert acklab(*args)[0] == 0
    code, _, stderr = acklab(*args)
    assert code == 3
    assert "already pulled" in stderr


def test_missing_configuration_is_a_usage_error(tmp_path, env, acklab):
    env.delenv("GITLAB_URL")
    code, _, stderr = acklab("evidence", "pull", "--project", "1", "--pipeline", "1")
    assert code == 2
    assert "set GITLAB_URL" in stderr
    env.setenv("GITLAB_URL", "http://127.0.0.1:1")
    env.delenv("GITLAB_TOKEN")
    code, _, stderr = acklab("evidence", "pull", "--project", "1", "--pipeline", "1")
    assert code == 2
    assert "set GITLAB_TOKEN" in stderr


def test_an_unreachable_gitlab_is_a_lab_error(tmp_path, env, acklab):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the pull: nothing listens there
    env.setenv("GITLAB_URL", f"http://127.0.0.1:{port}")
    code, _, stderr = acklab("evidence", "pull", "--project", "1", "--pipeline", "1", "--out", tmp_path / "o")
    assert code == 4
    assert "cannot reach GitLab" in stderr
