"""Ports handed out by one lab are not handed out by another lab running beside it."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acklab.harness import ports


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The claims directory in a temporary directory of the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"acklab-leases-{os.getuid()}" / "ports"


def kernel_picks(monkeypatch: pytest.MonkeyPatch, *picked: int) -> None:
    """The kernel's picks, in order."""
    sequence: Iterator[int] = iter(picked)
    monkeypatch.setattr(ports, "_pick", lambda host: next(sequence))


def test_a_port_another_lab_was_handed_lately_is_not_handed_out_again(
    claims: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_picks(monkeypatch, 41001, 41001, 41002)
    assert ports.free_port() == 41001
    # The first lab has not bound it yet; the kernel offers the same port to the second.
    assert ports.free_port() == 41002
    assert sorted(p.name for p in claims.iterdir()) == ["41001", "41002"]
    assert claims.stat().st_mode & 0o777 == 0o700


def test_an_expired_claim_is_taken_over(claims: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claims.parent.mkdir(mode=0o700)
    claims.mkdir(mode=0o700)
    old = time.time() - ports.CLAIM_S - 1
    (claims / "41003").touch()
    os.utime(claims / "41003", (old, old))
    kernel_picks(monkeypatch, 41003)
    assert ports.free_port() == 41003
    assert time.time() - (claims / "41003").stat().st_mtime < ports.CLAIM_S


def test_a_claims_directory_others_could_write_is_not_used(
    claims: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims.parent.mkdir(mode=0o700)
    claims.mkdir(mode=0o700)
    claims.chmod(0o777)
    (claims / "41004").touch()
    kernel_picks(monkeypatch, 41004)
    assert ports.free_port() == 41004  # the kernel's pick, no claim read or written
    assert [p.name for p in claims.iterdir()] == ["41004"]


def test_a_symlink_in_place_of_the_claims_directory_is_not_followed(
    claims: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    claims.parent.mkdir(mode=0o700)
    claims.symlink_to(elsewhere)
    kernel_picks(monkeypatch, 41005)
    assert ports.free_port() == 41005
    assert list(elsewhere.iterdir()) == []


def test_expired_claims_are_removed_once_there_are_many(
    claims: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "PRUNE_OVER", 3)
    claims.parent.mkdir(mode=0o700)
    claims.mkdir(mode=0o700)
    old = time.time() - ports.CLAIM_S - 1
    for port in (41010, 41011, 41012):
        (claims / str(port)).touch()
        os.utime(claims / str(port), (old, old))
    (claims / "41013").touch()
    kernel_picks(monkeypatch, 41014)
    assert ports.free_port() == 41014
    assert sorted(p.name for p in claims.iterdir()) == ["41013", "41014"]


def test_a_real_pick_is_a_port_nothing_listens_on(claims: Path) -> None:
    import socket

    port = ports.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: the lab's service can bind it
    assert (claims / str(port)).exists()
