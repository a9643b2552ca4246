"""The Dramatiq actor of `tests.consumers.queued_orders`, on the Redis broker.

Dramatiq keeps a taken message in its worker's acks set; a worker whose heartbeat is older than
``heartbeat_timeout`` (``ACKLAB_TEST_HEARTBEAT_MS``) is taken for dead, and another worker puts its
messages back on the queue — while the first may still be working on them. Worker:
``dramatiq tests.consumers.dramatiq_orders --processes 1 --threads 1``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker

from tests.consumers import queued_orders

broker = RedisBroker(
    url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    heartbeat_timeout=int(os.environ.get("ACKLAB_TEST_HEARTBEAT_MS", "60000")),
    maintenance_chance=MAINTENANCE_SCALE,  # look for dead workers on every fetch
)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="orders", max_retries=0)
def fulfil_job(event_id: str, order_id: str) -> None:
    queued_orders.fulfil(event_id, order_id)
