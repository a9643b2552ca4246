"""One experiment's view of a served target: a sender's client, the effects probe, the clock.

`Lab.open` serves the target for the experiment's needs and wraps its transport in the
`FaultTransport`; trials (`harness.core.trial.TrialContext`) deliver and observe through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import httpx

from acklab.harness.core.plan import RunSettings
from acklab.harness.targets import Endpoint, Needs, Target
from acklab.harness.wire.providers import ProviderProfile, profile
from acklab.harness.wire.signing import SIGNERS, Signer
from acklab.harness.wire.transports import FaultTransport


@dataclass
class Lab:
    """A served target plus everything a trial needs to deliver to it and read its effects."""

    target: Target
    endpoint: Endpoint
    transport: FaultTransport
    client: httpx.AsyncClient
    profile: ProviderProfile
    signer: Signer
    settings: RunSettings
    horizon_s: float
    # What an experiment measures once and its later trials reuse (timeout-overlap's calibration).
    memo: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def url(self) -> httpx.URL:
        """The endpoint, parsed once (not per delivery)."""
        return httpx.URL(self.endpoint.url)

    @property
    def schedule(self) -> tuple[float, ...]:
        """The profile's retry schedule, compressed, as seconds since the first attempt."""
        return self.profile.compressed_schedule(self.settings.time_compression)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        target: Target,
        needs: Needs,
        settings: RunSettings,
        served: AbstractAsyncContextManager[Endpoint] | None = None,
    ) -> AsyncIterator[Lab]:
        # --handler-timeout is the bound on each delivery's answer, exactly: what a hanging
        # target costs per delivery (below the sender's timeout, it ends the sender's wait too).
        horizon_s = settings.handler_timeout_s
        async with served or target.serve(needs) as endpoint:
            transport = FaultTransport(endpoint.transport, horizon_s=horizon_s)
            # Providers do not follow redirects (a 3xx is a failed delivery) and ignore proxies here.
            client = httpx.AsyncClient(
                transport=transport, follow_redirects=False, trust_env=False, timeout=httpx.Timeout(horizon_s)
            )
            try:
                yield cls(
                    target=target,
                    endpoint=endpoint,
                    transport=transport,
                    client=client,
                    profile=profile(target.scheme),
                    signer=SIGNERS[target.scheme],
                    settings=settings,
                    horizon_s=horizon_s,
                )
            finally:
                await client.aclose()
