"""Real webhook consumers, written the way people write them, that the lab attacks over sockets.

Each module is a service of its own (``python -m tests.consumers.<module> ...``), started by
the tests (or by the lab through a target spec's ``command:``) as a separate process:

* `ack_then_process`: FastAPI; answers 2xx first, a background task writes the effect
  50-500 ms later. ``--mode duplicates`` processes every delivery; ``correct`` claims the
  event id before it answers.
* `dedupe_by_id`: a stdlib ``http.server`` Stripe receiver that answers 2xx to an event id
  it knows (Stripe's documented practice); ``--mode overwrite`` also stores the new amount.
* `wsgi_receipts`: a plain WSGI app under gunicorn with several worker processes; it claims
  each event with a unique receipt and sends a confirmation e-mail after committing.
* `fast_receiver`: answers in about a millisecond once warm; its first requests are slow.
* `gitlab_hook`: a CI server's GitLab push hook, authenticated by ``X-Gitlab-Token`` only.
* `alert_hook`: an Alertmanager receiver: unsigned, counts alerts per resource over HTTP.
* `slow_boot`: listens at once but answers 503 for a while after every start, reading its
  configuration from its working directory; ``no-dedupe``, ``receipt`` and
  ``fails-after-commit`` (its post-commit step fails: 500 after every commit).
"""
