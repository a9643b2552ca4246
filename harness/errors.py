"""Errors of the harness package: its one exception tree, every class in it.

A finding about the handler under test is never an exception: it is a verdict. These are
the lab's own failures, each carrying its exit code (docs/cli.md#exit-codes-every-command).
The code is the class's: a failure that needs another code is another class, never an
``exit_code=`` at the raise site. Classes defined beside the code that raises them name
their module; ``tests/test_errors.py`` checks this drawing against the classes.

AcklabError (evidence.exitcodes)
└── HarnessError                                exit 4: the lab could not run
    ├── UsageError                              exit 2: options that cannot go together
    ├── SpecError                               exit 3: a target/experiment spec or an option is invalid
    │   ├── UnknownExperiment                   exit 3: an experiment name that does not exist
    │   └── Http2Refused                        exit 3: a single-packet burst against a target without HTTP/2
    ├── RemoteRefused                           exit 5: a target off the loopback range without --allow-remote
    ├── ForeignService                          exit 5: the endpoint is served by a process outside the job
    ├── ConfinementUnavailable (procs.confinement)  exit 5: untrusted code would run unconfined
    ├── TargetUnreachable                       exit 4: the endpoint does not accept connections
    ├── ProbeError                              exit 4: the effects probe (SQL or HTTP) could not be read
    │   └── SchemaChanged (targets.schema_pin)  exit 4: the schema the lab pinned changed under a count
    ├── SchemaError (targets.schema_pin)        exit 4: the fixture's schema could not be read, made or pinned
    ├── TemplateFailed (targets.pg_templates)   exit 4: a setup's template database could not be made or copied
                                                     (caught: the serve runs its setup instead)
    ├── LabIntegrityError (core.self_check)     exit 4: acklab's own verdict code was changed in this process
    ├── GitFailed (procs.worktrees)             exit 4: a git command the lab needed failed
    ├── PostgresUnavailable (procs.pgtemp)      exit 4: the temporary PostgreSQL could not be started
    ├── ClockUnavailable (procs.clock)          exit 4: the consumer's clock cannot be shifted here (no libfaketime)
    ├── RespError (services.resp)               exit 4: the lab's Redis answered an error reply, or no RESP
    ├── NetFaultError (netfaults.errors)        exit 4: the fault proxy could not start, inject or lift a fault
    │   ├── FaultInvalid (netfaults.errors)     exit 3: a fault's attributes or record are not a fault
    │   ├── ProxyRefused (netfaults.errors)     exit 5: the proxy asked to listen off loopback
    │   ├── FaultInUse (netfaults.errors)       exit 2: a second fault injected while one is active
    │   └── LinkUnhealthy (netfaults.errors)    exit 4: after lifting, a fresh connection did not round-trip
    └── RunInterrupted                          exit 6: Ctrl-C / SIGTERM / --deadline; the run is resumable
        └── SweepInterrupted (sweep.run)        exit 6: the same, during a sweep

Signals caught where they are raised, never an exit code of their own:

AssertionError
└── Counterexample (explore.explorer)           a schedule broke an invariant (what Hypothesis shrinks)

Exception
├── LabFailure (explore.explorer)               the lab failed during an example; never shrunk into a verdict
└── _Dropped (sinks.outbound)                   raised after the headers went out: uvicorn cuts the response

httpx.RemoteProtocolError
└── NotHttp2 (wire.burst_h2)                    the target answered the h2 preface with something else
"""

from __future__ import annotations

from acklab.evidence.exitcodes import AcklabError, ExitCode


class HarnessError(AcklabError):
    """Root of the harness package's errors: the lab, not the handler, failed."""

    exit_code = ExitCode.LAB_ERROR


class UsageError(HarnessError):
    """Options that cannot go together, or a command asked of something it does not apply to."""

    exit_code = ExitCode.USAGE


class SpecError(HarnessError):
    """A spec file or an option is invalid; the message names the field, the value and the fix."""

    exit_code = ExitCode.INVALID_INPUT


class UnknownExperiment(SpecError):
    """An experiment name that is not one of the stable names."""


class Http2Refused(SpecError):
    """``burst_sync: single-packet`` asked of a target that does not speak HTTP/2."""


class RemoteRefused(HarnessError):
    """A target endpoint off the loopback range, refused before any traffic was sent."""

    exit_code = ExitCode.REFUSED


class ForeignService(HarnessError):
    """The endpoint of a service the lab did not start is served by a process outside the job
    (a server left over from another job); refused before any traffic was sent."""

    exit_code = ExitCode.REFUSED


class TargetUnreachable(HarnessError):
    """The target's endpoint refused or did not answer the connection."""

    exit_code = ExitCode.LAB_ERROR


class ProbeError(HarnessError):
    """The effects probe could not read the target's database (or its effects endpoint)."""

    exit_code = ExitCode.LAB_ERROR


class RunInterrupted(HarnessError):
    """The run was interrupted (Ctrl-C, SIGTERM or its deadline) after writing what it had; resumable."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, *, deadline: bool = False) -> None:
        super().__init__(message)
        self.deadline = deadline  # False: a signal (Ctrl-C, SIGTERM) stopped it
