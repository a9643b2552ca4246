"""The worker of a plain Redis list (``ACKLAB_TEST_QUEUE=list``): ``BRPOP``, then the job.

What many consumers write before they reach for a library: one blocking pop, and the job run
at once. The job is in no Redis key while it runs (no ``unacked``, no started registry): only
the worker's connection, silent since its pop returned, says that it holds one.

    REDIS_URL=redis://127.0.0.1:6379/0 python -m tests.consumers.list_worker
"""

from __future__ import annotations

import json
import os

from redis import Redis

from tests.consumers.queued_orders import LIST_KEY, fulfil


def main() -> None:
    redis = Redis.from_url(os.environ["REDIS_URL"])
    redis.ping()
    print("list worker ready", flush=True)
    while True:
        popped = redis.brpop([LIST_KEY], timeout=1)
        if popped is None:
            continue
        job = json.loads(popped[1])
        print(f"{job['event_id']}: {fulfil(job['event_id'], job['order_id'])}", flush=True)


if __name__ == "__main__":
    main()
