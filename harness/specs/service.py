"""The sections of a target spec that say how the lab runs the consumer: ``command:`` (and its
``ready``), ``setup:``, ``topology:``, ``prepare:``, ``workers:`` and ``queues:``. Read as part of
`harness.specs.target.TargetSpec`, which re-exports them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from acklab.evidence.documents.base import Omit
from acklab.harness.specs.sections import Headers, Items, Section

DEFAULT_READY_TIMEOUT_S = 15.0
DEFAULT_SETUP_TIMEOUT_S = 120.0


class Ready(Section):
    """``command.ready``: how the lab knows the service is ready."""

    SCHEMA = "target#/properties/command/properties/ready"

    url: Omit[str] = None  # None: the endpoint
    method: Literal["GET", "HEAD", "POST", "PUT", "OPTIONS"] = "GET"
    body: Omit[str] = None
    status: Items[int] = ()
    routes: bool = True


class Command(Section):
    """``command:``: how the lab starts the service itself."""

    SCHEMA = "target#/properties/command"

    argv: Items[str]
    env: Headers = Field(default_factory=dict)
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    cwd: Omit[str] = None
    ready: Ready = Field(default_factory=Ready)


class Setup(Section):
    """``setup:``: run once in the service's working directory before it is first served."""

    SCHEMA = "target#/properties/setup"

    argv: Items[str]
    env: Headers = Field(default_factory=dict)
    timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    # false: it acts outside its scratch and database, so every serve runs it (harness.targets.templates)
    template: bool = True


class Topology(Section):
    """``topology:``: how production runs the consumer: `replicas` processes of ``command:`` behind
    the lab's balancer (`harness.targets.fleet`)."""

    SCHEMA = "target#/properties/topology"

    replicas: int = 1


class PrepareRequest(Section):
    """``prepare.request``: a request to the app's own API that makes an event's object."""

    SCHEMA = "target#/properties/prepare/properties/request"

    method: Literal["POST", "PUT", "PATCH", "GET"] = "POST"
    url: str
    body: Any = None
    headers: Headers = Field(default_factory=dict)
    ok_status: Items[int] = (200, 201, 202, 204)


class Prepare(Section):
    """``prepare:``: makes the object an event is about before its first delivery, once per object
    (a request to the app, or SQL on effects.sql's database; `harness.targets.prepare`)."""

    SCHEMA = "target#/properties/prepare"

    request: Omit[PrepareRequest] = None
    sql: Omit[str] = None


class WorkerReady(Section):
    """``workers[].ready``: a line of the worker's output, or a URL, that says it takes jobs."""

    SCHEMA = "target#/properties/workers/items/properties/ready"

    log: Omit[str] = None
    url: Omit[str] = None
    status: Omit[Items[int]] = None


class Worker(Section):
    """One of ``workers:``: a command the lab starts `count` times, after ``services:`` and before
    ``command:`` (`harness.targets.queues`)."""

    SCHEMA = "target#/properties/workers/items"

    argv: Items[str]
    env: Headers = Field(default_factory=dict)
    cwd: Omit[str] = None
    count: int = 1
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    ready: WorkerReady = Field(default_factory=WorkerReady)


class Queues(Section):
    """``queues:`` in its mapping form: the Redis keys holding the consumer's jobs, how long to wait
    for them to drain, and how long visibility-timeout holds a taken job."""

    SCHEMA = "target#/properties/queues/oneOf/1"

    keys: Items[str]
    drained_within_s: float = 30.0
    hold_s: float = 5.0
