"""The fault transport: what the sender sees per fault, and what the lab records of the handler."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from acklab.harness.wire.faults import LostAck, NoFault, ResetAfterSend, SenderTimeout
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.transports import TICKET, FaultTransport, Ticket, asgi_transport


class SlowHandler:
    """An inner transport double: reads the whole body, works `delay_s`, answers `status`."""

    def __init__(self, delay_s: float = 0.05, status: int = 200) -> None:
        self.delay_s, self.status = delay_s, status
        self.bodies: list[bytes] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        # Read the stream itself, as a server does (aread() would return the buffered content).
        self.bodies.append(b"".join([chunk async for chunk in request.stream]))  # type: ignore[union-attr]
        await asyncio.sleep(self.delay_s)
        return httpx.Response(self.status, json={"status": "fulfilled"})


def record() -> DeliveryRecord:
    return DeliveryRecord(
        seq=0, event_id="evt_1", attempt=1, kind="original", fault="x", headers={}, body=b"{}"
    )


async def deliver(fault, handler: SlowHandler, *, confirm=None, sender_timeout_s: float = 5.0):
    transport = FaultTransport(httpx.MockTransport(handler))
    rec = record()
    ticket = Ticket(rec, fault, sender_timeout_s, confirm=confirm)
    async with httpx.AsyncClient(transport=transport) as client:
        request = client.build_request(
            "POST", "http://target/hooks", content=b'{"id":"evt_1"}', extensions={TICKET: ticket}
        )
        try:
            response = await client.send(request)
            outcome: object = response.status_code
        except httpx.HTTPError as exc:
            outcome = type(exc)
        at_sender_done = rec.status
        assert await transport.quiesce(5)
    return outcome, at_sender_done, rec


def test_no_fault_hands_the_sender_the_handlers_answer():
    outcome, _, rec = asyncio.run(deliver(NoFault(), SlowHandler()))
    assert (outcome, rec.status) == (200, 200)


def test_a_sender_timeout_does_not_cut_the_handler_off():
    handler = SlowHandler(delay_s=0.1)
    outcome, at_sender_done, rec = asyncio.run(deliver(SenderTimeout(0.01), handler))
    assert outcome is httpx.ReadTimeout
    assert at_sender_done is None  # the sender gave up first ...
    assert rec.status == 200  # ... and the lab still heard the handler answer
    assert rec.latency_ms >= 100


def test_lost_ack_confirms_after_the_handler_answered_then_hands_out_a_504():
    seen = []

    async def confirm(rec: DeliveryRecord, synthetic: int) -> bool:
        seen.append((rec.status, synthetic))
        return True

    outcome, _, rec = asyncio.run(deliver(LostAck(), SlowHandler(), confirm=confirm))
    assert outcome == 504
    assert seen == [(200, 504)]
    assert rec.status == 200


@pytest.mark.parametrize("status", [400, 500])
def test_lost_ack_hands_on_a_handlers_4xx_or_5xx_as_it_is(status):
    seen = []

    async def confirm(rec: DeliveryRecord, synthetic: int) -> bool:
        seen.append(rec.seq)
        return True

    outcome, _, rec = asyncio.run(deliver(LostAck(), SlowHandler(status=status), confirm=confirm))
    assert (outcome, rec.status, seen) == (status, status, [])  # nothing to lose, nothing confirmed


def test_lost_ack_without_a_confirmed_commit_hands_on_the_real_answer():
    async def never(rec: DeliveryRecord, synthetic: int) -> bool:
        return False

    outcome, _, rec = asyncio.run(deliver(LostAck(), SlowHandler(), confirm=never))
    assert (outcome, rec.status) == (200, 200)


def test_a_reset_reaches_the_sender_after_the_whole_request_reached_the_handler():
    handler = SlowHandler(delay_s=0.05)
    outcome, at_sender_done, rec = asyncio.run(deliver(ResetAfterSend(), handler))
    assert outcome is httpx.ReadError
    assert at_sender_done is None
    assert handler.bodies == [b'{"id":"evt_1"}']
    assert rec.status == 200


def test_a_connect_error_is_the_same_for_sender_and_lab():
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = FaultTransport(httpx.MockTransport(refuse))
    rec = record()

    async def go() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            request = client.build_request(
                "POST", "http://t/", content=b"{}", extensions={TICKET: Ticket(rec, ResetAfterSend(), 1.0)}
            )
            with pytest.raises(httpx.ConnectError):
                await client.send(request)

    asyncio.run(go())
    assert rec.status is None
    assert rec.handler_error is not None
    assert "refused" in rec.handler_error


async def _in_process(app, *, horizon_s: float = 5.0, sender_timeout_s: float = 5.0):
    from acklab.harness.wire.transports import asgi_transport

    transport = FaultTransport(asgi_transport(app), horizon_s=horizon_s)
    rec = record()
    async with httpx.AsyncClient(transport=transport) as client:
        request = client.build_request(
            "POST",
            "http://app/hooks",
            content=b"{}",
            extensions={TICKET: Ticket(rec, NoFault(), sender_timeout_s)},
        )
        try:
            outcome: object = (await client.send(request)).status_code
        except httpx.HTTPError as exc:
            outcome = type(exc)
        await transport.quiesce(horizon_s + 1)
    return outcome, rec


def test_an_in_process_answer_is_read_bounded_like_a_socket_answer():
    from acklab.harness.wire.bodies import LIMIT_BYTES

    chunks_sent = []

    async def huge(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(64):  # 64 MiB, one MiB a chunk
            chunks_sent.append(1)
            await send({"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    outcome, rec = asyncio.run(_in_process(huge))
    body = rec.response_body
    assert outcome == 200
    assert body is not None
    assert (body.read, body.truncated) == (LIMIT_BYTES, True)
    assert len(chunks_sent) == 64  # the app ran to its end; only what it sent past the cap was dropped


def test_an_app_that_never_completes_a_response_is_a_closed_connection_not_a_lab_crash():
    async def silent(scope, receive, send):
        await receive()  # reads the request, answers nothing

    outcome, rec = asyncio.run(_in_process(silent))
    assert outcome is httpx.RemoteProtocolError
    assert rec.status is None
    assert "without sending a complete response" in (rec.error or "")


def test_the_handler_timeout_bounds_the_whole_answer_of_a_hanging_app():
    async def hangs(scope, receive, send):
        await asyncio.Event().wait()

    outcome, rec = asyncio.run(_in_process(hangs, horizon_s=1.0, sender_timeout_s=15.0))
    assert outcome is httpx.ReadTimeout  # the lab's bound, not the sender's 15 s
    assert 900 <= rec.latency_ms < 10_000, rec.latency_ms


def _swallowing(entered: asyncio.Event, answer: str):
    """An app that turns the cancellation thrown into it into an error of its own (as a FastAPI
    sync endpoint did: its session closed under its thread, SQLAlchemy raised, httpx answered 500)
    or into an answer."""

    async def app(scope, receive, send):
        await receive()
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if answer == "raises":
                raise RuntimeError("Method 'close()' can't be called here") from None
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

    return app


@pytest.mark.parametrize("answer", ["raises", "answers"])
def test_a_cancellation_an_in_process_app_swallowed_is_still_a_cancellation(answer):
    """Ctrl-C or SIGTERM cancels the run's task while the app answers in it: the run must stop
    (exit 6), never see a 500 or an answer and go on to its end."""

    async def cancelled_while_answering() -> asyncio.Task[httpx.Response]:
        entered = asyncio.Event()
        transport = asgi_transport(_swallowing(entered, answer))
        async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as client:
            task = asyncio.create_task(client.get("/orders/ord_1/effects"))
            await entered.wait()
            task.cancel()
            await asyncio.wait({task})
        return task

    assert asyncio.run(cancelled_while_answering()).cancelled()


def test_a_timeout_an_in_process_app_swallowed_is_still_a_timeout():
    async def timed_out() -> None:
        transport = asgi_transport(_swallowing(asyncio.Event(), "answers"))
        async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as client:
            async with asyncio.timeout(0.05):  # the app waits for the cancellation: any bound ends it
                await client.get("/")

    with pytest.raises(TimeoutError):
        asyncio.run(timed_out())


class StalledLoopHandler(SlowHandler):
    """Answers after `delay_s` in which the lab's event loop ran nothing (a process descheduled on a
    loaded machine): the answer and the sender's expired timer are seen in the same turn of the loop."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(b"".join([chunk async for chunk in request.stream]))  # type: ignore[union-attr]
        time.sleep(self.delay_s)  # blocking on purpose: nothing else runs meanwhile
        return httpx.Response(self.status, json={"status": "fulfilled"})


def test_an_answer_the_lab_finds_with_its_expired_timer_goes_to_the_sender():
    # The lab cannot tell an answer that came late from one it read late (its loop stalled): the
    # sender gets it. A timeout is declared only when the timer fired with no answer there, so a
    # loaded lab does not time out a correct handler on its own delay.
    outcome, _, rec = asyncio.run(deliver(SenderTimeout(0.005), StalledLoopHandler(delay_s=0.03)))
    assert rec.latency_ms >= 30
    assert (outcome, rec.status) == (200, 200)


def test_an_answer_read_before_the_senders_timeout_reaches_the_sender():
    outcome, _, rec = asyncio.run(deliver(SenderTimeout(1.0), StalledLoopHandler(delay_s=0.01)))
    assert (outcome, rec.status) == (200, 200)


class LateStartRecord(DeliveryRecord):
    """A record whose delivery task starts 5 ms after the lab handed the request over (the loop
    busy with something else meanwhile, as on a loaded machine)."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "sent_mono" and value is not None:
            asyncio.get_running_loop().call_soon(time.sleep, 0.005)


def test_a_senders_timeout_and_the_latency_that_proves_it_are_one_measure():
    async def once() -> tuple[object, float]:
        transport = FaultTransport(httpx.MockTransport(SlowHandler(delay_s=0.008)))
        rec = LateStartRecord(
            seq=0, event_id="evt_1", attempt=1, kind="original", fault="x", headers={}, body=b"{}"
        )
        ticket = Ticket(rec, SenderTimeout(0.010), 5.0)
        async with httpx.AsyncClient(transport=transport) as client:
            request = client.build_request(
                "POST", "http://target/hooks", content=b"{}", extensions={TICKET: ticket}
            )
            try:
                outcome: object = (await client.send(request)).status_code
            except httpx.HTTPError as exc:
                outcome = type(exc)
            assert await transport.quiesce(5)
        return outcome, rec.latency_ms

    outcome, latency_ms = asyncio.run(once())
    # 5 ms before the delivery's task ran, then 8 ms of handler: 13 ms after the sender started
    # its 10 ms clock. It timed out, and the latency timeout-overlap proves that with says so too.
    assert outcome is httpx.ReadTimeout
    assert latency_ms > 10
