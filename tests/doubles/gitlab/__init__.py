"""A GitLab API double: a real HTTP server speaking the REST v4 endpoints python-gitlab calls.

`server.py` holds the state, the app factory and the live server; `ci.py` the project,
pipeline, job and artifact routes. Other routers (merge requests, commits, notes,
repository files) mount through `create_app(state, routers=[...])`.
"""
