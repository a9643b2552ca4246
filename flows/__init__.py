"""The repair flow: reproduce, propose, guard, approve, verify in a sandbox, strike again, publish.

`runner` chains the checkpoints; `flows/README.md` walks through each, docs/repair.md is the
reference. Its exception tree, every class in it, is drawn in ``flows/errors.py``.
"""
