"""A load balancer in front of a consumer's replicas: round-robin, or the replica a delivery asks for.

Production runs several processes of one consumer behind a balancer; a dedupe kept in one
process's memory buys nothing when the duplicate reaches another. `Balancer` is the
transport under the lab's `FaultTransport` for a target with ``topology: {replicas: N}``:
each request goes to the next replica's origin in turn — or to the one its ``REPLICA``
extension names (replica-duplicates sends an original and its duplicate to different
replicas) — and the delivery's record says which replica it reached (`DeliveryRecord.replica`).
The Host header is kept as the sender wrote it, as a balancer passes it on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import httpx

from acklab.harness.errors import HarnessError
from acklab.harness.wire.records import DeliveryRecord

REPLICA = "acklab.replica"  # request extension: the index of the replica this request must reach
RECORD = "acklab.record"  # request extension: the delivery's record (the lab's transport takes its ticket)


class Balancer(httpx.AsyncBaseTransport):
    """Round-robin over `origins` ((host, port) of each replica), recorded per delivery."""

    def __init__(self, inner: httpx.AsyncBaseTransport, origins: Sequence[tuple[str, int]]) -> None:
        if not origins:
            raise HarnessError("a balancer needs at least one replica")
        self._inner, self.origins = inner, tuple(origins)
        self._turn = itertools.cycle(range(len(self.origins)))

    def pick(self, request: httpx.Request) -> int:
        asked = request.extensions.get(REPLICA)
        if asked is None:
            return next(self._turn)
        if not isinstance(asked, int) or not 0 <= asked < len(self.origins):
            raise HarnessError(f"replica {asked!r} asked of a balancer over {len(self.origins)} replicas")
        return asked

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self.pick(request)
        host, port = self.origins[index]
        host_header = request.headers.get("host")
        request.url = request.url.copy_with(host=host, port=port)
        if host_header is not None:
            request.headers["host"] = host_header
        record = request.extensions.get(RECORD)
        if isinstance(record, DeliveryRecord):
            record.replica = index
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
