"""Spec values and flags out of range are refused by `validate` and `run`
alike, naming the field: NaN and infinities, ports outside 1-65535, control characters (CRLF)
or over-long values in anything that becomes a URL or a header, from the spec or through
``env:`` (exit 3); and flags (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acklab.cli import main
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec

ENDPOINT_ENV = "ACKLAB_TEST_OUT_OF_RANGE_ENDPOINT"


def acklab(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out + err


def doc(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    base = target_doc("shop", "http://127.0.0.1:9/hooks", f"sqlite:///{tmp_path / 'shop.db'}")
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = base
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return base


CASES: dict[str, tuple[dict[str, Any], str | None, str]] = {
    "nan-timeout": ({"delivery__timeout_s": float("nan")}, None, "delivery.timeout_s: got nan"),
    "inf-within": ({"expect__effects_within_s": float("inf")}, None, "expect.effects_within_s: got inf"),
    "port-99999": (
        {"endpoint": "http://127.0.0.1:99999/hooks"},
        None,
        "endpoint: the URL names a port outside",
    ),
    "port-0": ({"endpoint": "http://127.0.0.1:0/hooks"}, None, "endpoint: the URL names a port outside"),
    "db-port": (
        {"effects__sql__url": "postgresql://u@127.0.0.1:70000/shop"},
        None,
        "effects.sql.url: the URL names a port outside",
    ),
    "env-crlf": (
        {"endpoint": f"env:{ENDPOINT_ENV}"},
        "http://127.0.0.1:9/hooks\r\nX-Injected: 1",
        f"endpoint: env:{ENDPOINT_ENV} holds the control character '\\r'",
    ),
    "env-120kb": (
        {"endpoint": f"env:{ENDPOINT_ENV}"},
        "http://127.0.0.1:9/" + "a" * 120_000,
        f"endpoint: env:{ENDPOINT_ENV} is 120,019 characters long",
    ),
    "env-header-lf": (
        {"headers": {"X-Tenant": f"env:{ENDPOINT_ENV}"}},
        "tenant\n",
        "headers.X-Tenant: the header's value holds the control character '\\n'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_and_run_refuse_the_value_naming_the_field(tmp_path, capsys, monkeypatch, case):
    changes, endpoint, expected = CASES[case]
    monkeypatch.setenv(SECRET_ENV, SECRET)
    if endpoint is not None:
        monkeypatch.setenv(ENDPOINT_ENV, endpoint)
    spec = write_spec(tmp_path / "shop.yaml", doc(tmp_path, **changes))
    code, said = acklab(capsys, "validate", spec)
    assert code == 3, said
    assert expected in said
    code, said = acklab(capsys, "run", "--target", spec, "--trials", "1", "--out", tmp_path / "out")
    assert code == 3, said
    assert expected in said
    assert "internal error" not in said
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*/run.json"))


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--deadline", "nan"), ("--deadline", "inf"), ("--handler-timeout", "nan"), ("--settle-ms", "-inf")],
)
def test_a_flag_that_is_not_a_finite_number_is_a_usage_error(tmp_path, capsys, flag, value):
    code, said = acklab(capsys, "run", "--target", "fixture:live", flag, value, "--out", tmp_path / "out")
    assert code == 2, said
    assert f"Invalid value for '{flag}'" in said
    assert "not a finite number" in said or "not in the range" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("deadline", [float("nan"), float("inf"), 0.0])
def test_the_api_refuses_a_deadline_that_bounds_nothing(tmp_path, deadline):
    import acklab
    from acklab.harness.errors import SpecError

    with pytest.raises(SpecError, match="deadline_s: got"):
        acklab.run("fixture:live", deadline_s=deadline, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
