"""The fault harness: deliver like real providers, break on purpose, judge from the real database.

Command line (DESIGN.md): ``acklab run | plan | validate`` (`harness.cli`), ``acklab demo``.

Python API (what the repair flow and the benchmarks use)::

    from acklab.harness.runner import RunOptions, run
    result = run(RunOptions(target="fixture:unsafe", experiments=("lost-ack",), trials=3))
    result.exit_code      # 0 pass, 1 a verdict failed, 4 the lab could not run
    result.as_json()      # exactly the ``acklab run --json`` object
    result.bundle         # out/<run_id>/ (run.json, incidents/, trials/, reports/, manifest.json)

From another checkout, run it as a subprocess with ``cwd`` and ``PYTHONPATH`` set to that
checkout, so ``app`` (and the harness) are imported from it and not from the installed
project: ``PYTHONPATH=<worktree> python -c "import sys; from acklab.cli import main;
main(sys.argv[1:])" run --json ...``.

Layout: `providers` (facts), `signing`, `transports` + `faults` (the one seam),
`targets/` (fixture, spec files, effects probes), `experiments/`, `plan`, `trial`,
`execute` + `runner` (engine), `checkpoint` (bundle, resume), `verdicts`, `records`,
`events` -> `progress` / `journal_sink`, `cli`, `demo`. Errors: `harness.errors`.
"""
