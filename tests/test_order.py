"""The suite runs its slowest files first (tests/conftest.py: `longest_first`), then the others
by their number of tests, so that pytest-xdist's workers, handed whole files in collection order
(--no-loadscope-reorder), finish together."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import longest_first


def test_the_record_ranks_the_files_slowest_first(tmp_path: Path) -> None:
    record = tmp_path / "results.json"
    record.write_text(json.dumps({"slowest_files": [
        {"file": "tests/test_a.py", "wall_s": 1.5},
        {"file": "tests/test_b.py", "wall_s": 40.0},
        {"file": "tests/test_c.py", "wall_s": 7.0},
    ]}))  # fmt: skip
    assert longest_first(record) == {"tests/test_b.py": 0, "tests/test_c.py": 1, "tests/test_a.py": 2}


@pytest.mark.parametrize(
    "text", [None, "{", "[]", '{"slowest_files": [{"file": "tests/test_a.py"}]}'],
    ids=["missing", "not-json", "not-a-record", "no-wall-time"],
)  # fmt: skip
def test_without_a_readable_record_no_file_is_ranked(tmp_path: Path, text: str | None) -> None:
    record = tmp_path / "results.json"
    if text is not None:
        record.write_text(text)
    assert longest_first(record) == {}


def test_this_session_collected_the_ranked_files_first_each_file_whole(
    request: pytest.FixtureRequest,
) -> None:
    rank = longest_first()
    assert rank, "bench/results.json names no slowest files"
    files = [item.nodeid.partition("::")[0] for item in request.session.items]
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(runs) == len(set(runs))  # a file's tests together
    count = Counter(files)
    places = [(rank[f], 0) if f in rank else (len(rank), -count[f]) for f in runs]
    assert places == sorted(places)  # the slowest first, then the others by their number of tests
