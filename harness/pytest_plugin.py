"""The ``poolfuzz`` pytest plugin: run poolfuzz's state machines on your pool from your own test suite.

Registered through the ``pytest11`` entry point (``pip install poolfuzz`` is enough; ``-p no:poolfuzz``
turns it off), so a project tests its pool class with the same machines, invariants, hypothesis
profiles and corpus as ``poolfuzz fuzz``, without a separate runner in its CI:

* on the command line, ``pytest --poolfuzz-target FAMILY=module:attr`` (repeatable) adds one test
  item per target and device, ``poolfuzz::FAMILY[module:attr@DEVICE]``;
* in a test module, ``test_my_pool = poolfuzz_test("req_to_token", "mypkg.pools:MyReqPool")``
  declares the same as an ordinary test function.

Both run :func:`poolfuzz.harness.machines.run_machine`: under the profile :mod:`poolfuzz.harness.machines.settings`
picks (``ci``, derandomised, when ``CI`` is set; else ``dev``), unless ``--poolfuzz-profile``
names another.  A counterexample is shrunk and saved under ``--poolfuzz-corpus`` (default
``corpus/found`` under the rootdir); the failure names the broken invariant and the saved trace,
and the terminal summary lists every saved trace with its ``poolfuzz replay`` command.

Item names depend only on the options, never on the order of imports or on randomness, so the
workers of ``pytest -n auto`` (pytest-xdist) collect the same items.  A target that does not
resolve or does not fit its family stops the run before any test with one line: a
``pytest.UsageError`` (exit status 4) for ``--poolfuzz-target``, a one-line collection error for
:func:`poolfuzz_test`.  Validation is :func:`poolfuzz.harness.fuzz.options.select_targets`, the same as
``harness fuzz --target``.

This module imports nothing of poolfuzz at import time: pytest loads it in every test run of an
environment where poolfuzz is installed, and it must cost nothing (and change no hypothesis
profile) in a run that does not ask for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from poolfuzz.harness.arguments import positive

TRACE_PROPERTY = "poolfuzz_trace"
"""``user_properties`` key of a failed test's saved trace path (travels with xdist reports and into JUnit XML)."""
INVARIANT_PROPERTY = "poolfuzz_invariant"
"""``user_properties`` key of the invariant id a failed test broke."""
KNOWN_PROPERTY = "poolfuzz_known"
"""``user_properties`` key of a known upstream finding (``corpus/known.toml``) a test re-found and passed."""
MARKER = "poolfuzz"
"""The marker every poolfuzz test carries: ``-m poolfuzz`` selects them, ``-m "not poolfuzz"`` skips them."""
DEFAULT_CORPUS = Path("corpus") / "found"
"""Where found traces go, under the rootdir, when ``--poolfuzz-corpus`` is not given."""


@dataclass(frozen=True)
class PoolfuzzOptions:
    """The plugin's options for one pytest run, validated once in :func:`pytest_configure`."""

    targets: tuple[tuple[str, str], ...] = ()
    """``(family, module:attr)`` pairs from ``--poolfuzz-target``, in order, duplicates dropped."""
    devices: tuple[str, ...] = ("cpu",)
    corpus: Path = DEFAULT_CORPUS
    profile: str | None = None
    """The hypothesis profile; ``None``: :func:`poolfuzz.harness.machines.settings.default_profile_name` at run time."""
    max_examples: int | None = None
    steps: int | None = None
    strict: bool = False
    """``--poolfuzz-strict``: a known upstream finding fails the test as a new one does."""


@dataclass
class _Found:
    nodeid: str
    invariant: str
    path: str


@dataclass
class _Session:
    """Per-run state: the options, and the traces failed poolfuzz tests saved (for the summary)."""

    options: PoolfuzzOptions
    found: list[_Found] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    """``nodeid: [invariant] known finding ...`` of tests that re-found a known upstream finding and passed."""


_SESSION = pytest.StashKey[_Session]()


# ------------------------------------------------------------------ options
def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--poolfuzz-*`` options (prefixed so they never clash with a project's own, ``--target`` say)."""
    group = parser.getgroup("poolfuzz", "poolfuzz: fuzz a pool class with poolfuzz's state machines")
    group.addoption("--poolfuzz-target", action="append", default=[], dest="poolfuzz_targets",
                    metavar="FAMILY=module:attr",
                    help="run FAMILY's state machine on the class module:attr (repeatable); "
                         "no test is added without this option")
    group.addoption("--poolfuzz-device", action="append", default=[], dest="poolfuzz_devices", metavar="DEVICE",
                    help="device the --poolfuzz-target machines run on (repeatable; default: cpu)")
    group.addoption("--poolfuzz-corpus", default=None, dest="poolfuzz_corpus", metavar="DIR",
                    help="folder for the shrunk trace of every counterexample found (default: corpus/found "
                         "under the rootdir)")
    group.addoption("--poolfuzz-profile", default=None, dest="poolfuzz_profile", metavar="NAME",
                    help="hypothesis profile of the poolfuzz tests (default: HYPOTHESIS_PROFILE, else ci "
                         "when CI is set, else dev)")
    group.addoption("--poolfuzz-max-examples", type=positive(int), default=None, dest="poolfuzz_max_examples",
                    metavar="N", help="examples per poolfuzz test (overrides the profile and poolfuzz_test)")
    group.addoption("--poolfuzz-steps", type=positive(int), default=None, dest="poolfuzz_steps", metavar="N",
                    help="steps per example (overrides the profile and poolfuzz_test)")
    group.addoption("--poolfuzz-strict", action="store_true", default=False, dest="poolfuzz_strict",
                    help="a known upstream finding (corpus/known.toml) fails its test as a new one does "
                         "(default: recorded in the summary, the test passes)")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def validate_targets(items: Iterable[str]) -> list[tuple[str, str]]:
    """``FAMILY=module:attr`` strings to ``(family, spec)`` pairs; :class:`UnknownTargetError` with one line if not.

    Delegates to :func:`poolfuzz.harness.fuzz.options.select_targets`, so the plugin accepts and refuses exactly
    what ``harness fuzz --target`` does: an unknown family, a malformed spec, a module that does not
    import, a missing attribute, a class that does not fit the family.
    """
    wanted = [item for item in items if item.strip()]
    if not wanted:  # select_targets([]) would mean every family; and a run that names none imports nothing
        return []
    from poolfuzz.harness.fuzz.options import select_targets
    from poolfuzz.harness.judge.families import UnknownTargetError

    try:
        targets, _ = select_targets(wanted)
    except UnknownTargetError as exc:
        raise UnknownTargetError(_one_line(str(exc))) from None
    return [(ref.family, ref.spec) for ref in targets]


def _corpus(config: pytest.Config, value: str | None) -> Path:
    if value is None:
        return config.rootpath / DEFAULT_CORPUS
    return (config.invocation_params.dir / value).resolve()


def _read_options(config: pytest.Config) -> PoolfuzzOptions:
    """The validated options; a bad target or profile is a :class:`pytest.UsageError` of one line."""
    targets: list[tuple[str, str]] = []
    if config.getoption("poolfuzz_targets"):
        from poolfuzz.harness.judge.families import UnknownTargetError

        try:
            targets = validate_targets(config.getoption("poolfuzz_targets"))
        except UnknownTargetError as exc:
            raise pytest.UsageError(f"--poolfuzz-target: {exc}") from None
    profile: str | None = config.getoption("poolfuzz_profile")
    if profile is not None:
        from poolfuzz.harness.machines.settings import profile as named_profile

        try:
            named_profile(profile)
        except Exception as exc:  # noqa: BLE001 - hypothesis raises InvalidArgument
            raise pytest.UsageError(f"--poolfuzz-profile: {_one_line(str(exc))}") from None
    devices = tuple(dict.fromkeys(d.strip() for d in config.getoption("poolfuzz_devices") if d.strip()))
    return PoolfuzzOptions(
        targets=tuple(targets),
        devices=devices or ("cpu",),
        corpus=_corpus(config, config.getoption("poolfuzz_corpus")),
        profile=profile,
        max_examples=config.getoption("poolfuzz_max_examples"),
        steps=config.getoption("poolfuzz_steps"),
        strict=bool(config.getoption("poolfuzz_strict", False)),
    )


def options_of(config: pytest.Config) -> PoolfuzzOptions:
    """This run's options; the defaults when the plugin is not registered (``-p no:poolfuzz``)."""
    session = config.stash.get(_SESSION, None)
    if session is not None:
        return session.options
    return PoolfuzzOptions(corpus=config.rootpath / DEFAULT_CORPUS)


# ------------------------------------------------------------------ hooks
def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, validate the options (stopping the run on a bad one) and the run's reporter."""
    config.addinivalue_line("markers", f"{MARKER}: a poolfuzz state-machine test (poolfuzz.harness.pytest_plugin)")
    session = _Session(_read_options(config))
    config.stash[_SESSION] = session
    config.pluginmanager.register(_Reporter(session), "poolfuzz-reporter")


class _Reporter:
    """Adds the ``--poolfuzz-target`` items, gathers saved traces from reports, and lists them at the end."""

    def __init__(self, session: _Session) -> None:
        self.session = session

    @pytest.hookimpl(tryfirst=True)  # before -k/-m/--deselect filter the items, so they filter ours too
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        options = self.session.options
        if not options.targets:
            return
        # Collected the way pytest collects a file: the collect and item hooks fire, counts include them.
        items.extend(session.genitems(PoolfuzzSuite.from_parent(session, name="poolfuzz", nodeid="poolfuzz")))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On an xdist controller these are the workers' reports: user_properties travel with them.
        properties = dict(report.user_properties)
        if report.passed and KNOWN_PROPERTY in properties:
            self.session.known.append(f"{report.nodeid}: {properties[KNOWN_PROPERTY]}")
        if not report.failed:
            return
        path = properties.get(TRACE_PROPERTY)
        if path is not None:
            self.session.found.append(_Found(report.nodeid, str(properties.get(INVARIANT_PROPERTY, "")), str(path)))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.session.known:
            terminalreporter.write_sep("=", "poolfuzz known upstream findings (recorded; --poolfuzz-strict fails them)")
            for line in dict.fromkeys(self.session.known):
                terminalreporter.write_line(line)
        if not self.session.found:
            return
        terminalreporter.write_sep("=", "poolfuzz counterexamples (shrunk traces)")
        here = terminalreporter.config.invocation_params.dir
        lines: dict[str, None] = {}  # once each, in the order the failures were reported
        for found in self.session.found:
            shown = Path(found.path)
            if shown.is_relative_to(here):
                shown = shown.relative_to(here)
            lines[f"{found.nodeid}: [{found.invariant}] poolfuzz replay {shown}"] = None
        for line in lines:
            terminalreporter.write_line(line)


# ------------------------------------------------------------------ items
class PoolfuzzSuite(pytest.Collector):
    """The ``poolfuzz`` node that holds the ``--poolfuzz-target`` items: one per target and device."""

    def collect(self) -> list[pytest.Item]:
        options = options_of(self.config)
        return [
            PoolfuzzItem.from_parent(self, name=f"{name}[{spec}@{device}]", family=name, spec=spec, device=device)
            for name, spec in options.targets
            for device in options.devices
        ]


class PoolfuzzItem(pytest.Item):
    """One family's machine on one target and device, added by ``--poolfuzz-target``."""

    def __init__(self, *, family: str, spec: str, device: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.family = family
        self.spec = spec
        self.device = device
        self.add_marker(MARKER)

    def runtest(self) -> None:
        run_poolfuzz(self, self.family, self.spec, device=self.device)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"poolfuzz {self.family}={self.spec} on {self.device}"


# ------------------------------------------------------------------ running
def run_poolfuzz(
    node: pytest.Item, family: str, spec: str, *, device: str = "cpu",
    max_examples: int | None = None, steps: int | None = None,
) -> None:
    """Run ``family``'s machine on ``spec`` as the test ``node``; on a violation fail it with the saved trace.

    The budget: ``--poolfuzz-max-examples``/``--poolfuzz-steps`` if given, else ``max_examples``/``steps``,
    else the profile's.  The failure message is the violation (invariant id, shrunk steps, where the
    trace was saved) and its replay command, without a traceback through the harness; the trace path
    is also recorded in ``node.user_properties`` for the terminal summary (and JUnit XML).  A known upstream
    finding (``corpus/known.toml``) is recorded, not failed (unless ``--poolfuzz-strict``), and the target is fuzzed
    on once more by the machine that steers around its known findings, where its family has one.
    """
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
    from poolfuzz.harness.machines import build_settings, make_machine, run_machine, violation_of
    from poolfuzz.harness.machines.settings import default_profile_name

    options = options_of(node.config)
    overrides: dict[str, Any] = {}
    examples = options.max_examples or max_examples
    if examples is not None:
        overrides["max_examples"] = examples
    count = options.steps or steps
    if count is not None:
        overrides["stateful_step_count"] = count
    settings = build_settings(options.profile or default_profile_name(), **overrides)
    machine = make_machine(family, spec, device=device)
    for _ in range(2):  # a known finding is recorded, then the machine that steers around it fuzzes on
        try:
            run_machine(machine, settings=settings, corpus=options.corpus, note=f"found by pytest {node.nodeid}")
        except Exception as exc:
            violation = violation_of(exc)
            if violation is None:
                raise
        else:
            return
        # Failed outside the ``except`` block, so the report is this message alone, not a chain of exceptions.
        failure = judge_violation(node, family, spec, device, violation, strict=options.strict)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        from poolfuzz.harness.upstream.findings import known_finding_filter, machine_avoiding_known_findings

        if known_finding_filter(family) is None:
            return
        machine = machine_avoiding_known_findings(family, spec, device=device)


def judge_violation(node: Any, family: str, spec: str, device: str, violation: Any, *, strict: bool = False) -> str | None:
    """The failure message of ``violation`` found on ``node``, or ``None`` when it is a known upstream finding
    (``corpus/known.toml``, matched by :func:`poolfuzz.harness.upstream.known.known_finding_of`) and not ``strict``: then it
    is recorded in ``node.user_properties`` (:data:`KNOWN_PROPERTY`) with a warning, and the test passes."""
    from poolfuzz.harness.upstream.known import known_finding_of

    known = known_finding_of(family, spec, violation.invariant_id, violation.trace_path)
    what = f"known finding {known.number} ({known.key}, {known.upstream})" if known is not None else ""
    if known is not None and not strict:
        node.user_properties.append((KNOWN_PROPERTY, f"[{violation.invariant_id}] {what}: {violation.trace_path}"))
        import warnings

        warnings.warn(f"poolfuzz: {family}={spec} re-found {what} [{violation.invariant_id}]; recorded", stacklevel=2)
        return None
    lines = [f"poolfuzz: {family}={spec} on {device} broke invariant {violation.invariant_id}", str(violation)]
    if known is not None:
        lines.insert(1, f"  {what}; --poolfuzz-strict fails it")
    if violation.trace_path is not None:
        node.user_properties.append((TRACE_PROPERTY, str(violation.trace_path)))
        node.user_properties.append((INVARIANT_PROPERTY, violation.invariant_id))
        lines.append(f"  replay: poolfuzz replay {violation.trace_path}")
    return "\n".join(lines)


def poolfuzz_test(
    family: str, target: str, *, device: str = "cpu", max_examples: int | None = None, steps: int | None = None,
) -> Callable[[pytest.FixtureRequest], None]:
    """A test function that runs ``family``'s state machine on ``target`` (``module:attr``).

    Assign it to a ``test_`` name in a test module and pytest collects it like any other test::

        from poolfuzz.harness.pytest_plugin import poolfuzz_test

        test_my_row_pool = poolfuzz_test("req_to_token", "mypkg.pools:MyReqPool")

    The target is checked here, when the module is imported: a bad one is a one-line collection
    error of that module, not a failure found by fuzzing.  ``max_examples`` and ``steps`` set this
    test's budget (the command line's ``--poolfuzz-max-examples``/``--poolfuzz-steps`` win over them);
    ``device="cuda"`` skips without a CUDA device.  The test's node id is the module's name for it,
    so it is the same in every xdist worker.
    """
    from poolfuzz.harness.judge.families import UnknownTargetError

    try:
        ((name, spec),) = validate_targets([f"{family}={target}"])
    except UnknownTargetError as exc:
        raise pytest.Collector.CollectError(f"poolfuzz_test({family!r}, {target!r}): {exc}") from None

    def test(request: pytest.FixtureRequest) -> None:
        assert isinstance(request.node, pytest.Item)
        run_poolfuzz(request.node, name, spec, device=device, max_examples=max_examples, steps=steps)

    test.__name__ = test.__qualname__ = f"poolfuzz_{name}"
    test.__doc__ = f"poolfuzz: {name}'s state machine on {spec} ({device})."
    marked: Callable[[pytest.FixtureRequest], None] = getattr(pytest.mark, MARKER)(family=name, target=spec)(test)
    return marked


__all__ = ["PoolfuzzItem", "PoolfuzzOptions", "PoolfuzzSuite", "judge_violation", "options_of", "poolfuzz_test",
           "run_poolfuzz", "validate_targets"]
