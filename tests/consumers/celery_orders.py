"""The Celery app of `tests.consumers.queued_orders`: Redis as the broker, ``acks_late``.

A task is acknowledged once it returned (``task_acks_late``); a worker killed before that leaves
it in Redis's ``unacked`` hash, and after the visibility timeout (``ACKLAB_TEST_VISIBILITY_S``)
a worker puts it back on the queue. Worker: ``celery -A tests.consumers.celery_orders worker``.
"""

from __future__ import annotations

import os

from celery import Celery

from tests.consumers import queued_orders

app = Celery("orders", broker=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("ACKLAB_TEST_VISIBILITY_S", "3600")),
        # How often a worker looks for jobs past their visibility timeout (kombu: 10 s by default).
        "unacked_restore_interval": 0.5,
        "unacked_restore_throttle": 1,
        # A worker killed while it restores (holding the unacked_mutex key) would hold off every
        # other worker's restore for this long (kombu: 300 s by default; docs/queues.md).
        "unacked_mutex_expire": 3,
    },
)


@app.task(name="orders.fulfil")
def fulfil(event_id: str, order_id: str) -> str:
    return queued_orders.fulfil(event_id, order_id)
