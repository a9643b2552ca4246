from __future__ import annotations

import pytest

from acklab.cli import main


class Acklab:
    """Runs the real `acklab` entry point in-process; returns (exit code, stdout, stderr)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        return int(info.value.code or 0), out, err


@pytest.fixture
def acklab(capsys: pytest.CaptureFixture[str]) -> Acklab:
    return Acklab(capsys)


from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: E402, F401 - a fixture, used by name
