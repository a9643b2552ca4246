"""A command: service's own output: every start kept, capped, and its directory leased then removed."""

from __future__ import annotations

from acklab.evidence.journal import Journal
from acklab.harness.procs.janitor import open_leases
from acklab.harness.procs.leases import LeaseBook
from acklab.harness.procs.service_process import LOG_HEAD_BYTES, Command, ServiceProcess


def test_the_log_keeps_every_start_head_and_tail_within_the_cap_and_outlives_its_directory(tmp_path):
    with Journal(tmp_path / "journal.sqlite") as journal:
        service = ServiceProcess(
            Command(argv=("true",)),
            "http://127.0.0.1:9/hooks",
            name="shop",
            leases=LeaseBook(journal, "run-1"),
        )
        log_dir = service._log_dir
        [lease] = open_leases(journal)
        assert lease.payload["resource"] == "directory"
        assert lease.payload["detail"]["path"] == str(log_dir)
        assert log_dir.name.startswith("acklab-service-log-")
        (log_dir / "service-9-1.log").write_bytes(b"first start\n" + b"a" * 300_000)
        (log_dir / "service-9-2.log").write_bytes(b"b" * 300_000 + b"\nlast words\n")
        service.starts = 2

        whole = service.log_bytes(cap=10_000_000)
        assert whole.index(b"start 1 of the service") < whole.index(b"first start") < whole.index(b"start 2")
        capped = service.log_bytes(cap=200_000)
        assert len(capped) < 200_000 + 200
        assert capped.startswith(b"--- acklab: start 1")
        assert capped.endswith(b"last words\n")
        assert b" bytes cut (service.log keeps 200000 bytes) ---" in capped
        assert capped[:LOG_HEAD_BYTES] == whole[:LOG_HEAD_BYTES]

        kept = service.log_bytes()
        service.remove_logs()
        assert not log_dir.exists()
        assert open_leases(journal) == []
        assert service.log_bytes() == kept  # the bundle can still take its copy
