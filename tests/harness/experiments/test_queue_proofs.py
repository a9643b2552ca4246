"""The queue experiments' proofs say what the sender saw when the try was decided."""

from __future__ import annotations

import httpx

from acklab.harness.experiments.queues import unacknowledged
from acklab.harness.wire.records import DeliveryRecord


def record() -> DeliveryRecord:
    return DeliveryRecord(
        seq=0, event_id="evt_1", attempt=1, kind="original", fault="worker-crash", headers={}, body=b"{}"
    )


def test_an_original_the_sender_timed_out_on_is_told_as_such_though_the_handler_answered_200_later() -> None:
    first = record()
    first.finish_sender(status=None, failure=httpx.ReadTimeout("sender timed out after 2.000 s"))
    proof = unacknowledged(first)
    first.status = 200  # the handler's late answer, recorded while the provider's retries ran
    assert not proof.landed
    assert "the sender got no answer (timeout: sender timed out after 2.000 s)" in proof.evidence
    assert "200" not in proof.evidence


def test_an_original_refused_with_a_status_names_the_status() -> None:
    first = record()
    first.finish_sender(status=503)
    first.status = 503
    assert "the sender got HTTP 503 for the original (seq 0)" in unacknowledged(first).evidence
