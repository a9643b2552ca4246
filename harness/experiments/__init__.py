"""The experiments, by stable name (docs/experiments.md): the registry, in the order of
`evidence.documents.verdicts.ExperimentName` (the one list of names; tests/test_names.py keeps
this registry equal to it).

The first six run by default. Beyond one event (docs/beyond-one-event.md): out-of-order,
sibling-events and race-with-request run by default too, but only on a target with their
section (lifecycle:, siblings:, competitor:); without it they are listed as skipped, with the
reason, and never judged. The deeper faults (crash-*, db-*), the provider's API (fetch-*,
provider-echo, effect-failure: docs/provider-api.md) and signatures as providers send them
(key-rotation, raw-bytes, clock-skew: docs/signatures.md) run only when named."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from acklab.evidence.documents.verdicts import EXPERIMENT_NAMES
from acklab.harness.errors import UnknownExperiment
from acklab.harness.experiments.base import Experiment
from acklab.harness.experiments.concurrent import ConcurrentDuplicatesExperiment
from acklab.harness.experiments.conflict import ConflictingPayloadExperiment
from acklab.harness.experiments.crash import CrashAfterCommitExperiment, CrashMidTransactionExperiment
from acklab.harness.experiments.crash_after_ack import CrashAfterAckExperiment
from acklab.harness.experiments.db_faults import DbBlackholeExperiment, DbLatencyExperiment, DbResetExperiment
from acklab.harness.experiments.echo import ProviderEchoExperiment
from acklab.harness.experiments.effect_failure import EffectFailureExperiment
from acklab.harness.experiments.fetching import (
    FetchLagExperiment,
    FetchStaleExperiment,
    FetchThrottledExperiment,
)
from acklab.harness.experiments.ordering import OutOfOrderExperiment
from acklab.harness.experiments.provider_retries import ProviderRetriesExperiment
from acklab.harness.experiments.queues import (
    BrokerRestartExperiment,
    EnqueueLostExperiment,
    LateDuplicateJobExperiment,
    VisibilityTimeoutExperiment,
    WorkerCrashAfterEffectExperiment,
)
from acklab.harness.experiments.race import RaceWithRequestExperiment
from acklab.harness.experiments.redelivery import LateRedeliveryExperiment, RestartRedeliveryExperiment
from acklab.harness.experiments.replay import ReplayExperiment
from acklab.harness.experiments.replicas import ReplicaDuplicatesExperiment
from acklab.harness.experiments.retrying import (
    LostAckExperiment,
    LostAckResetExperiment,
    TimeoutOverlapExperiment,
)
from acklab.harness.experiments.siblings import SiblingEventsExperiment
from acklab.harness.experiments.signatures import (
    ClockSkewExperiment,
    KeyRotationExperiment,
    RawBytesExperiment,
)

_REGISTERED: tuple[Experiment, ...] = (
    LostAckExperiment(),
    LostAckResetExperiment(),
    TimeoutOverlapExperiment(),
    ConcurrentDuplicatesExperiment(),
    ConflictingPayloadExperiment(),
    ReplayExperiment(),
    OutOfOrderExperiment(),
    SiblingEventsExperiment(),
    RaceWithRequestExperiment(),
    CrashAfterCommitExperiment(),
    CrashMidTransactionExperiment(),
    CrashAfterAckExperiment(),
    DbLatencyExperiment(),
    DbResetExperiment(),
    DbBlackholeExperiment(),
    FetchLagExperiment(),
    FetchStaleExperiment(),
    FetchThrottledExperiment(),
    ProviderEchoExperiment(),
    EffectFailureExperiment(),
    KeyRotationExperiment(),
    RawBytesExperiment(),
    ClockSkewExperiment(),
    WorkerCrashAfterEffectExperiment(),
    VisibilityTimeoutExperiment(),
    LateDuplicateJobExperiment(),
    BrokerRestartExperiment(),
    EnqueueLostExperiment(),
    ReplicaDuplicatesExperiment(),
    RestartRedeliveryExperiment(),
    LateRedeliveryExperiment(),
    ProviderRetriesExperiment(),
)
# In the one list's order, whatever the order above.
EXPERIMENTS: dict[str, Experiment] = {
    e.name: e for e in sorted(_REGISTERED, key=lambda e: EXPERIMENT_NAMES.index(e.name))
}

__all__ = ["EXPERIMENTS", "Experiment", "by_name"]


def by_name(names: Iterable[str]) -> list[Experiment]:
    """The experiments named (all of them when none is), in the stable order, without duplicates."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if name not in EXPERIMENTS:
            close = difflib.get_close_matches(name, list(EXPERIMENTS), n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UnknownExperiment(
                f"--experiment: got {name!r}; expected one of {', '.join(EXPERIMENTS)}.{hint}"
            )
    return [e for name, e in EXPERIMENTS.items() if name in wanted or (not wanted and e.default)]
