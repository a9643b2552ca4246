"""A run from options to bundle: plan, execute each experiment trial by trial with a
checkpoint per trial, re-read late effects, write incidents, run.json, reports and manifest.

The top of the harness below `cli`, `sweep` and `explore`: it may import every other part.
"""
