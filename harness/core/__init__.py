"""What a trial is made of: the frozen plan, the trial context that delivers and observes, the
records it keeps, fault proofs, verdicts judged from records alone, and the run's events.

Imports `wire`, `targets`, `specs` and `procs` of the harness; never `engine`, `cli` or an
experiment (experiments build on this package).
"""
