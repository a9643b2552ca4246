"""The webhook fixture: a small FastAPI + SQLAlchemy service that consumes order webhooks.

It imports nothing of the lab. ``app.main.create_app`` builds it; ``app.webhooks`` is the
live handler (the only file a repair may touch) and ``app.unsafe`` the reference unsafe one.
Its exception tree, every class in it, is drawn in ``app/errors.py``.
"""
