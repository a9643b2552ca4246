"""What a user's service gets of the lab's environment in the sandbox, and what it is told it lacked."""

from __future__ import annotations

from acklab.flows.sandbox.environment import unpassed
from acklab.harness.procs.service_process import Command
from acklab.harness.targets.served_spec import shared_env, shared_names

DOC = {
    "signing": {"scheme": "stripe", "secret": "env:SHOP_SIGNING_SECRET"},
    "headers": {"X-Api-Key": "env:SHOP_HOOK_KEY", "X-Static": "literal"},
    "effects": {"sql": {"url": "env:SHOP_COUNT_URL"}},
}


def test_the_spec_signing_and_header_variables_reach_the_service(monkeypatch):
    monkeypatch.setenv("SHOP_SIGNING_SECRET", "whsec_one")
    monkeypatch.setenv("SHOP_HOOK_KEY", "key-one")
    monkeypatch.setenv("SHOP_COUNT_URL", "sqlite:////tmp/x.db")
    assert shared_names(DOC) == ["SHOP_SIGNING_SECRET", "SHOP_HOOK_KEY"]  # not what only the lab reads
    command = Command(("gunicorn",), env={"SHOP_DB": "/tmp/shop.db", "SHOP_HOOK_KEY": "its-own"})
    served = shared_env(command, DOC)
    assert served is not None
    # command.env wins where it names the variable itself
    assert dict(served.env) == {
        "SHOP_SIGNING_SECRET": "whsec_one",
        "SHOP_HOOK_KEY": "its-own",
        "SHOP_DB": "/tmp/shop.db",
    }
    monkeypatch.delenv("SHOP_SIGNING_SECRET")
    unset = shared_env(command, DOC)
    assert unset is not None
    assert "SHOP_SIGNING_SECRET" not in unset.env
    assert shared_env(None, DOC) is None


def test_the_variables_a_service_failed_for_are_named(monkeypatch):
    monkeypatch.setenv("SHOP_RECEIPTS_FROM", "receipts@shop.example")
    monkeypatch.setenv("SHOP_DB", "/tmp/shop.db")
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-never-passed")
    log = (
        "Traceback (most recent call last):\n  ...\nKeyError: 'SHOP_RECEIPTS_FROM'\n"
        "SHOP_DB is /tmp/shop.db; GITLAB_TOKEN missing; PATH=/usr/bin; NOT_SET_HERE\n"
    )
    # SHOP_DB was passed, PATH is inherited, GITLAB_TOKEN is the lab's and never passed, NOT_SET_HERE is
    # not set in the lab's environment either: only SHOP_RECEIPTS_FROM is one the service went without.
    assert unpassed(log, passed=["SHOP_DB"]) == ["SHOP_RECEIPTS_FROM"]
    assert unpassed("nothing named", passed=[]) == []
