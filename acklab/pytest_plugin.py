"""acklab in your own test suite: attack a webhook handler from a pytest test, in-process.

pytest loads this plugin through the ``pytest11`` entry point whenever acklab is installed.
It is inert until a test uses it: it imports nothing of the lab, prints nothing and changes
no other test (``-p no:acklab`` turns it off altogether).

The ``webhook_lab`` fixture::

    def test_orders_webhook(webhook_lab):
        result = webhook_lab.attack(app, endpoint="/webhooks/orders", secret=SECRET,
                                    effects=lambda event_id: count_fulfillments(event_id))
        assert result.passed, result.explain()

``webhook_lab.attack`` is `acklab.attack` (every keyword of it) with the session's options
applied: ``--acklab-trials N`` and ``--acklab-seed SEED`` override every attack's (rerun a
failure with the seed its message shows), ``--acklab-out DIR`` is where the bundles go
(default: ``acklab/`` under pytest's temporary directory). Each attack writes its bundle as
``acklab run`` does, so ``acklab evidence verify`` and ``acklab console`` read it; the
bundle's path is recorded as the test's ``acklab_bundle`` property (in ``--junitxml``).

One test per experiment: ``@pytest.mark.webhook_spec("acklab.yaml")`` (a target spec,
relative to the test file; or ``webhook_spec(experiments=[...])`` without one) parametrises
the test's ``webhook_experiment`` argument with each experiment, and ``webhook_lab.attack``
in that test uses the spec and that experiment. pytest's report — and GitLab's JUnit
widget through ``--junitxml`` — shows one result per experiment; one that does not apply
to the target is reported skipped, with its reason::

    @pytest.mark.webhook_spec("acklab.yaml")
    def test_webhook(webhook_lab, webhook_experiment):
        result = webhook_lab.attack(app, effects=count_fulfillments)
        assert result.passed, result.explain()
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from acklab.harness.engine.results import RunResult

MARKER = "webhook_spec"
_RUNS = pytest.StashKey[list[Path]]()
_OUT = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acklab", "acklab: attack webhook handlers (the webhook_lab fixture)")
    group.addoption(
        "--acklab-trials",
        type=int,
        default=None,
        metavar="N",
        help="Trials per experiment of every webhook_lab.attack (overrides the test's; default 3).",
    )
    group.addoption(
        "--acklab-seed",
        type=int,
        default=None,
        metavar="SEED",
        help="Root seed of every webhook_lab.attack (overrides the test's; default: random, shown "
        "in the failure message).",
    )
    group.addoption(
        "--acklab-out",
        default=None,
        metavar="DIR",
        help="Evidence directory for the attacks' bundles (default: acklab/ under pytest's "
        "temporary directory).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(path=None, *, experiments=None): one test per experiment (the webhook_experiment "
        "argument) of the acklab target spec at path (relative to the test file); webhook_lab.attack "
        "in the test uses that spec and experiment",
    )
    trials = config.getoption("--acklab-trials")
    if trials is not None and trials < 1:
        raise pytest.UsageError(f"--acklab-trials: got {trials}; expected at least 1")


def _experiments(marker: pytest.Mark) -> list[str]:
    from acklab.harness.experiments import EXPERIMENTS, by_name

    names = marker.kwargs.get("experiments")
    if names is None:
        return [name for name, experiment in EXPERIMENTS.items() if experiment.default]
    if isinstance(names, str):
        names = [names]
    return [e.name for e in by_name(list(names))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or "webhook_experiment" not in metafunc.fixturenames:
        return
    from acklab.evidence.exitcodes import AcklabError

    try:
        names = _experiments(marker)
    except AcklabError as exc:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} on {metafunc.definition.nodeid}: {exc}") from None
    metafunc.parametrize("webhook_experiment", names, ids=names)


@pytest.fixture
def webhook_experiment(request: pytest.FixtureRequest) -> str:
    """The experiment this test runs (parametrised by ``@pytest.mark.webhook_spec``)."""
    pytest.fail(
        f"{request.node.nodeid}: webhook_experiment is given by @pytest.mark.{MARKER}(...) on the test; "
        "add the marker, or name the experiments with webhook_lab.attack(..., experiments=[...])",
        pytrace=False,
    )


def _out(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    if _OUT not in config.stash:
        given = config.getoption("--acklab-out")
        out = Path(given) if given else factory.getbasetemp() / "acklab"
        out.mkdir(parents=True, exist_ok=True)
        config.stash[_OUT] = out
    return config.stash[_OUT]


class WebhookLab:
    """``webhook_lab``: attacks an app with the session's options (`attack`)."""

    def __init__(self, request: pytest.FixtureRequest, out: Path) -> None:
        self._request, self.out = request, out
        self._isolation: Any = None

    @property
    def placeholders(self) -> dict[str, str]:
        """The run placeholders of the test's spec, allocated on first use and released after the test.

        ``port`` (a free loopback port), ``scratch`` (a fresh private directory); give them to
        your app (its database in ``scratch``, say) before ``attack``, which fills the spec's
        ``{{port}}`` and ``{{scratch}}`` with the same values.
        """
        if self._isolation is None:
            from acklab.harness.targets.isolation import Isolation

            self._isolation = Isolation.allocate(frozenset({"port", "scratch"}), label="pytest")
        return dict(self._isolation.values)

    def close(self) -> None:
        if self._isolation is not None:
            self._isolation.release()
            self._isolation = None

    def _marked(self) -> tuple[Any, str | None]:
        """The spec of the test's marker (a path, relative to the test file) and its experiment."""
        marker = self._request.node.get_closest_marker(MARKER)
        callspec = getattr(self._request.node, "callspec", None)
        experiment = callspec.params.get("webhook_experiment") if callspec is not None else None
        given = (marker.args[0] if marker.args else marker.kwargs.get("path")) if marker is not None else None
        if given is None:
            return None, experiment
        path = Path(given)
        return (path if path.is_absolute() else self._request.path.parent / path), experiment

    def attack(self, app: Any, **options: Any) -> RunResult:
        """`acklab.attack` on `app` with this session's trials, seed and evidence directory.

        Any keyword of `acklab.attack` may be given; ``--acklab-trials`` and ``--acklab-seed``
        override the test's own, the marker's spec and experiment are the defaults.
        """
        import acklab
        from acklab.harness.targets.app_spec import target_name

        config = self._request.config
        spec, experiment = self._marked()
        if spec is not None:
            options.setdefault("spec", spec)
        if experiment is not None:
            options.setdefault("experiments", [experiment])
        for option, keyword in (("--acklab-trials", "trials"), ("--acklab-seed", "seed")):
            if config.getoption(option) is not None:
                options[keyword] = config.getoption(option)
        if options.get("seed") is None:
            import secrets

            options["seed"] = secrets.randbits(32)  # chosen here, so the message can say how to rerun
        options.setdefault("out", self.out)
        options.setdefault("where", self._request.path.parent)
        options.setdefault("placeholders", self.placeholders)
        if "name" not in options and "spec" not in options:
            options["name"] = target_name(
                getattr(self._request.node, "originalname", self._request.node.name)
            )
        result = acklab.attack(app, **options)
        result.rerun = f"pytest '{self._request.node.nodeid}' --acklab-seed {result.seed}"
        self._request.node.user_properties.append(("acklab_bundle", str(result.bundle.resolve())))
        config.stash.setdefault(_RUNS, []).append(result.bundle)
        if experiment is not None:
            _skip_if_skipped(result, experiment)
        return result


def _skip_if_skipped(result: RunResult, experiment: str) -> None:
    """A marker test whose one experiment does not apply to the target is reported skipped, with why."""
    found = [e for e in result.experiments if e.name == experiment]
    if found and found[0].skipped:
        pytest.skip(f"{experiment}: {found[0].reason}")


@pytest.fixture
def webhook_lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookLab]:
    """Attack a webhook handler's app in-process: ``webhook_lab.attack(app, ...)`` (see `acklab.attack`)."""
    lab = WebhookLab(request, _out(request.config, tmp_path_factory))
    try:
        yield lab
    finally:
        lab.close()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    runs = config.stash.get(_RUNS, [])
    if not runs:
        return  # a suite that never attacked sees nothing of acklab
    out = config.stash[_OUT]
    terminalreporter.write_sep("-", "acklab")
    terminalreporter.write_line(
        f"{len(runs)} attack(s); evidence in {out} (acklab console --evidence {out}; "
        f"acklab evidence verify {out})"
    )
