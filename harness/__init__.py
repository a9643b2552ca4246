"""The fault harness: deliver like real providers, break on purpose, judge from the real database.

Command line (docs/cli.md): ``acklab run | plan | validate`` (`harness.cli.run`), ``acklab demo``.

Python API for users: ``acklab.run``, ``acklab.attack`` (`harness.engine.api`) and the pytest plugin
(``acklab.pytest_plugin``). Inside the project (the repair flow, the benchmarks)::

    from acklab.harness.engine.runner import RunOptions, run
    result = run(RunOptions(target="fixture:unsafe", experiments=("lost-ack",), trials=3))
    result.exit_code      # 0 pass, 1 a verdict failed, 4 the lab could not run
    result.as_json()      # exactly the ``acklab run --json`` object
    result.bundle         # out/<run_id>/ (run.json, incidents/, trials/, reports/, manifest.json)

From another checkout, run it as a subprocess whose ``acklab`` is that checkout's
(``cwd`` or ``PYTHONPATH`` set to it): a checkout's ``acklab`` package maps its own
folders beneath it (see ``acklab/__init__.py``), so ``acklab.app`` is that checkout's.

Layout: `providers` (facts), `signing`, `transports` + `faults` (the one seam),
`targets/` (fixture, spec files, effects and state probes), `experiments/`, `proofs` (a
fault proves it landed), `plan`, `trial`, `execute` + `runner` (engine), `late_read` (the
end-of-run re-read), `checkpoint` (bundle, resume), `verdicts`, `records`, `service_process`
(``command:``: readiness, kill, restart), `events` -> `progress` / `journal_sink`, `cli`,
`demo`. Errors: the harness's one exception tree, every class in it, is drawn in
``harness/errors.py``.
"""
