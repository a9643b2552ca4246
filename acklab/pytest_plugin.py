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
(default: ``.acklab/`` at pytest's rootdir, which ignores itself with a ``.gitignore`` as
``.pytest_cache`` does; the last ``--acklab-keep N`` runs are kept, default 20). Each attack
writes its bundle as ``acklab run`` does, so ``acklab evidence verify`` and ``acklab
console`` read it; the bundle's path is recorded as the test's ``acklab_bundle`` property
(in ``--junitxml``). ``webhook_lab.explore(app, budget=50, ...)`` runs the schedule
explorer on the app (the ``explore`` extra): a failing schedule is shrunk, and the failure
message says which seed replays the search.

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

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from typing import Unpack

    from acklab.harness.engine.options import AttackOptions, ExploreOptions, RunKeywords
    from acklab.harness.engine.results import RunResult
    from acklab.harness.explore.api import ExploreResult
    from acklab.harness.sinks import Sinks
    from acklab.harness.specs.target import TargetSpec


MARKER = "webhook_spec"
_RUNS = pytest.StashKey[list[Path]]()
_OUT = pytest.StashKey[Path]()
_STARTED = pytest.StashKey[float]()
_TEMPLATES = pytest.StashKey[contextlib.ExitStack]()
DEFAULT_OUT = ".acklab"
DEFAULT_KEEP = 20
GITIGNORE = "# Created by acklab's pytest plugin: evidence of webhook_lab runs (--acklab-out).\n*\n"


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
        help=f"Evidence directory for the attacks' bundles (default: {DEFAULT_OUT}/ at the rootdir, "
        "git-ignored by a .gitignore inside it).",
    )
    group.addoption(
        "--acklab-keep",
        type=int,
        default=None,
        metavar="N",
        help=f"Keep the last N runs' bundles in the evidence directory (default {DEFAULT_KEEP}; 0 keeps "
        "all); older ones are removed when a session first attacks.",
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
    keep = config.getoption("--acklab-keep")
    if keep is not None and keep < 0:
        raise pytest.UsageError(f"--acklab-keep: got {keep}; expected 0 (keep all) or more")
    # When this session began: only bundles from before it may be pruned (xdist's workers
    # take their controller's, so no worker removes what another wrote in this session).
    workerinput = getattr(config, "workerinput", None)
    started = workerinput.get("acklab_started") if isinstance(workerinput, dict) else None
    config.stash[_STARTED] = float(started) if started is not None else time.time()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker prunes by its controller's start, not its own."""
    node.workerinput["acklab_started"] = node.config.stash.get(_STARTED, time.time())


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


def _out(config: pytest.Config) -> Path:
    """The session's evidence directory, made (with its .gitignore) and pruned on first use."""
    if _OUT not in config.stash:
        given = config.getoption("--acklab-out")
        out = Path(given) if given else config.rootpath / DEFAULT_OUT
        out.mkdir(parents=True, exist_ok=True)
        ignore = out / ".gitignore"
        if not given and not ignore.exists():
            ignore.write_text(GITIGNORE, encoding="utf-8")
        keep = config.getoption("--acklab-keep")
        _prune(out, DEFAULT_KEEP if keep is None else keep, before=config.stash[_STARTED])
        config.stash[_OUT] = out
    return config.stash[_OUT]


def _prune(out: Path, keep: int, *, before: float) -> None:
    """Remove all but the newest `keep` bundles of `out` that were written before `before`.

    A bundle is a directory holding ``manifest.json`` (or an unfinished one: ``run.json``);
    nothing else in `out` is touched, and nothing written in this session is a candidate."""
    if keep == 0:
        return
    bundles = []
    for entry in out.iterdir():
        try:
            if entry.is_symlink() or not entry.is_dir():
                continue
            if not ((entry / "manifest.json").is_file() or (entry / "run.json").is_file()):
                continue
            bundles.append((entry.stat().st_mtime, entry.name, entry))
        except OSError:
            continue
    bundles.sort(reverse=True)
    for mtime, _, entry in bundles[keep:]:
        if mtime < before:
            shutil.rmtree(entry, ignore_errors=True)


class WebhookLab:
    """``webhook_lab``: attacks an app with the session's options (`attack`)."""

    def __init__(self, request: pytest.FixtureRequest, out: Path) -> None:
        self._request, self.out = request, out
        self._isolation: Any = None
        self._sinks: Sinks | None = None
        self.attacked = False  # an app ran in this process: the verdict code is checked after the test

    @property
    def placeholders(self) -> dict[str, str]:
        """The run placeholders of the test's spec, allocated on first use and released after the test.

        ``port`` (a free loopback port), ``scratch`` (a fresh private directory), and every other
        one the marker's spec uses (``smtp_port``, ``outbound_port``, ``database_url``); give them
        to your app (its database in ``scratch``, its mail to ``smtp_port``) before ``attack``,
        which fills the spec with the same values and runs its sinks on those ports.
        """
        if self._isolation is None:
            from acklab.harness.targets.isolation import Isolation
            from acklab.harness.targets.served_parts import database_server

            spec = self._spec()
            names = frozenset({"port", "scratch"} | (spec.run_placeholders if spec is not None else set()))
            server = database_server(spec) if spec is not None else None
            self._isolation = Isolation.allocate(names, database_server=server, label="pytest")
        return dict(self._isolation.values)

    def _spec(self) -> TargetSpec | None:
        """The marker's target spec as written (None without one)."""
        spec, _ = self._marked()
        if spec is None:
            return None
        from acklab.harness.specs.target import load_target_spec

        return load_target_spec(Path(spec))

    def _spec_sinks(self) -> Sinks | None:
        """The sinks the marker's spec names (``effects.smtp``, ``outbound``, ``provider_api``), started on the ports
        `placeholders` allocated (None: it names none)."""
        spec = self._spec()
        if spec is None:
            return None
        if not spec.effects.sinks:
            return None
        from acklab.harness.sinks import Sinks, sink_configs

        values = self.placeholders
        sinks = Sinks(sink_configs(spec.filled(values).effects, values))
        sinks.start()
        return sinks

    def sinks(
        self, *, smtp: bool | Mapping[str, Any] = True, **others: bool | Mapping[str, Any] | None
    ) -> Sinks:
        """The lab's sinks, started on free loopback ports for this test (stopped after it), each by
        its name in a spec's ``effects:``, as a spec's section says it: ``smtp`` (on unless
        ``smtp=False``; ``{"match": ...}``), ``outbound`` (``{"routes": [...], "idempotency_header":
        ...}``), ``provider_api`` (``{"provider": "stripe"}``, docs/provider-api.md). Point the app at
        ``.smtp_port`` / ``.outbound_url`` / ``.provider_api_url`` (any sink's: ``.port(name)``,
        ``.url(name)``) before ``attack``, which then counts what they receive beside the rows
        (``expect.max_emails``, ``max_calls``; docs/sinks.md)."""
        if self._sinks is None:
            from acklab.harness.sinks import Sinks

            self._sinks = Sinks.for_test(smtp=smtp, **others)
        return self._sinks

    def close(self) -> None:
        if self._isolation is not None:
            self._isolation.release()
            self._isolation = None
        if self._sinks is not None:
            self._sinks.stop()
            self._sinks = None

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

    def attack(self, app: Any, **options: Unpack[AttackOptions]) -> RunResult:
        """`acklab.attack` on `app` with this session's trials, seed and evidence directory.

        Any keyword of `acklab.attack` may be given (`AttackOptions`); ``--acklab-trials`` and
        ``--acklab-seed`` override the test's own, the marker's spec and experiment are the defaults.
        """
        # From the API's module, not acklab's namespace: a project's own acklab/ folder (where
        # `acklab init` writes its spec) on sys.path can shadow the package's root under an
        # editable install, never its modules.
        from acklab.harness.engine.api import attack
        from acklab.harness.targets.app_spec import target_name

        spec, experiment = self._marked()
        chosen: AttackOptions = {"out": self.out, "where": self._request.path.parent}
        chosen["placeholders"] = self.placeholders
        if spec is not None:
            chosen["spec"] = spec
        if experiment is not None:
            chosen["experiments"] = [experiment]
        if (
            self._sinks is None
            and "sinks" not in options
            and spec is not None
            and options.get("spec", spec) == spec
        ):
            self._sinks = self._spec_sinks()  # the marker's spec names sinks: run them on its placeholders
        if self._sinks is not None:
            chosen["sinks"] = self._sinks
        if "name" not in options and "spec" not in options and spec is None:
            chosen["name"] = target_name(self._test_name())
        chosen.update(options)
        trials, chosen["seed"] = self._session(chosen.get("seed"))
        if trials is not None:
            chosen["trials"] = trials
        self.attacked = True
        with _django_mail_to(chosen.get("sinks")):
            result = attack(app, **chosen)
        return self._ran(result, experiment)

    def run(self, target: str | Path | None = None, **options: Unpack[RunKeywords]) -> RunResult:
        """`acklab.run` on a target spec (default: the marker's) with this session's trials, seed and
        evidence directory: a service the spec names or starts (``command:``), over its socket."""
        from acklab.harness.engine.api import run

        spec, experiment = self._marked()
        path = target if target is not None else spec
        if path is None:
            raise pytest.UsageError(
                f"{self._request.node.nodeid}: webhook_lab.run() needs a target spec: pass its path, or mark "
                f"the test @pytest.mark.{MARKER}(PATH)"
            )
        chosen: RunKeywords = {"out": self.out}
        if experiment is not None:
            chosen["experiments"] = [experiment]
        chosen.update(options)
        trials, chosen["seed"] = self._session(chosen.get("seed"))
        if trials is not None:
            chosen["trials"] = trials
        _keep_templates(self._request.config)
        return self._ran(run(path, **chosen), experiment)

    def explore(self, app: Any, *, budget: int = 50, **options: Unpack[ExploreOptions]) -> ExploreResult:
        """The schedule explorer on `app`: up to `budget` generated schedules of sends, bursts,
        lost acknowledgements and conflicting bodies; a failing one is shrunk to a minimal
        schedule. Takes `acklab.attack`'s target keywords (``spec``, ``endpoint``, ``secret``,
        ``effects``...) and ``seed`` (``--acklab-seed`` overrides it: the failure message
        names the seed that replays the search). Needs the ``explore`` extra (Hypothesis)."""
        from acklab.harness.explore.api import explore_app
        from acklab.harness.targets.app_spec import target_name

        spec, _ = self._marked()
        chosen: ExploreOptions = {"out": self.out, "where": self._request.path.parent}
        chosen["placeholders"] = self.placeholders
        if spec is not None:
            chosen["spec"] = spec
        chosen.update(options)
        _, chosen["seed"] = self._session(chosen.get("seed"))  # (--acklab-trials: a budget is not trials)
        self.attacked = True
        result = explore_app(app, budget=budget, default_name=target_name(self._test_name()), **chosen)
        result = dataclasses.replace(result, rerun=self._rerun(result.seed))
        self._record(result.bundle)
        return result

    def _test_name(self) -> str:
        return str(getattr(self._request.node, "originalname", self._request.node.name))

    def _session(self, seed: int | None) -> tuple[int | None, int]:
        """The trials and the seed: ``--acklab-trials`` and ``--acklab-seed`` over the test's own; a
        seed chosen here when none is given, so the failure message can say how to rerun."""
        config = self._request.config
        trials: int | None = config.getoption("--acklab-trials")
        if config.getoption("--acklab-seed") is not None:
            seed = int(config.getoption("--acklab-seed"))
        if seed is None:
            import secrets

            seed = secrets.randbits(32)
        return trials, seed

    def _rerun(self, seed: int) -> str:
        return f"pytest '{self._request.node.nodeid}' --acklab-seed {seed}"

    def _record(self, bundle: Path) -> None:
        """The bundle as the test's ``acklab_bundle`` property, and among the session's runs (pruned)."""
        self._request.node.user_properties.append(("acklab_bundle", str(bundle.resolve())))
        self._request.config.stash.setdefault(_RUNS, []).append(bundle)

    def _ran(self, result: RunResult, experiment: str | None) -> RunResult:
        result = result.but(rerun=self._rerun(result.seed))
        self._record(result.bundle)
        _warn(result)
        if experiment is not None:
            _skip_if_skipped(result, experiment)
        return result


def _keep_templates(config: pytest.Config) -> None:
    """A spec's setup runs once for the session: each later run of it (one per experiment) starts
    from a copy of what it made (`acklab.harness.targets.templates`), dropped when pytest ends."""
    if _TEMPLATES in config.stash:
        return
    from acklab.harness.targets.templates import keeping

    stack = contextlib.ExitStack()
    stack.enter_context(keeping())
    config.stash[_TEMPLATES] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_TEMPLATES, None)
    if stack is not None:
        del config.stash[_TEMPLATES]
        stack.close()


@contextlib.contextmanager
def _django_mail_to(sinks: Any) -> Iterator[None]:
    """Django's SMTP backend pointed at the SMTP sink while an app of this process is attacked.

    pytest-django's test settings swap ``EMAIL_BACKEND`` for locmem: every receipt of the attack
    would land in ``mail.outbox`` and the sink would hear nothing — a duplicate receipt passed as
    none. Nothing changes where Django's settings are not configured or there is no SMTP sink."""
    port = getattr(sinks, "smtp_port", None)
    conf = sys.modules.get("django.conf")
    settings = getattr(conf, "settings", None)
    if port is None or settings is None or not settings.configured:
        yield
        return
    names = ("EMAIL_BACKEND", "EMAIL_HOST", "EMAIL_PORT", "EMAIL_USE_TLS", "EMAIL_USE_SSL")
    saved = {name: getattr(settings, name) for name in names}
    for name, value in zip(
        names, ("django.core.mail.backends.smtp.EmailBackend", "127.0.0.1", port, False, False), strict=True
    ):
        setattr(settings, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)


class AcklabWarning(UserWarning):
    """What a run saw that may make a pass mean less than it says (a sink that heard nothing)."""


def _warn(result: RunResult) -> None:
    """The run's warnings, as pytest warnings of the test: shown in its summary, never a silent pass."""
    import warnings

    for message in result.warnings:
        warnings.warn(AcklabWarning(f"acklab: {message}"), stacklevel=3)


def _skip_if_skipped(result: RunResult, experiment: str) -> None:
    """A marker test whose one experiment does not apply to the target is reported skipped, with why."""
    found = [e for e in result.experiments if e.name == experiment]
    if found and found[0].skipped:
        pytest.skip(f"{experiment}: {found[0].reason}")


@pytest.fixture
def webhook_lab(request: pytest.FixtureRequest) -> Iterator[WebhookLab]:
    """Attack a webhook handler's app in-process: ``webhook_lab.attack(app, ...)`` (see `acklab.attack`),
    or search schedules against it: ``webhook_lab.explore(app, budget=...)``."""
    lab = WebhookLab(request, _out(request.config))
    try:
        yield lab
    finally:
        lab.close()
    if lab.attacked:
        # The app ran in this process; what it left running, or a check of the API it bypassed,
        # could have changed the verdict code or the result after the attack's own check.
        from acklab.harness.core import self_check

        self_check.check(f"after {request.node.nodeid}, which attacked an app in this process")


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
