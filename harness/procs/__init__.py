"""Processes and resources the lab starts — the fixture as a process, a spec's own service,
a temporary PostgreSQL — each leased in the journal with a token beside it, and the janitor
that ends what a crashed lab left behind.
"""
