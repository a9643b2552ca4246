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
    walls = {"tests/test_a.py": 1.5, "tests/test_b.py": 40.0, "tests/test_c.py": 7.0}
    record.write_text(json.dumps({"file_walls": walls}))
    assert longest_first(record) == {"tests/test_b.py": 0, "tests/test_c.py": 1, "tests/test_a.py": 2}


@pytest.mark.parametrize(
    "text", [None, "{", "[]", '{"file_walls": {"tests/test_a.py": "slow"}}', '{"file_walls": ["tests/test_a.py"]}'],
    ids=["missing", "not-json", "not-a-record", "no-wall-time", "not-a-map"],
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
    assert rank, "bench/results.json records no file's wall time"
    files = [item.nodeid.partition("::")[0] for item in request.session.items]
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(runs) == len(set(runs))  # a file's tests together
    count = Counter(files)
    places = [(rank[f], 0) if f in rank else (len(rank), -count[f]) for f in runs]
    assert places == sorted(places)  # the slowest first, then the others by their number of tests
