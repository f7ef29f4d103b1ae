"""pytest plugin for the conformance kit (the ``trainspec`` pytest11 entry point).

Adds:

- ``--trainspec-target KIND=module:attribute`` (repeatable): one test item per check of that
  target (plus one for the structure layer), named ``KIND=module:attribute::CLAUSE-check_name``,
  so ``-k`` selects by clause or check name;
- ``--trainspec-timeout SECONDS``: the per-check watchdog (default 300, 0 disables it);
- a report header line naming the trainspec version, the spec version and the targets.

Verdicts map to pytest outcomes: passed -> passed, failed / xpassed / error -> failed,
skipped / blocked -> skipped, xfailed -> xfailed. A target given as a
:class:`~trainspec.conformance.Target` object carries its capabilities and expected failures.

The plugin is loaded in every pytest session of an environment that has trainspec installed,
so this module imports nothing heavy; checks are imported only when a target is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

import trainspec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainspec.conformance.core import Check
    from trainspec.conformance.report import CheckResult
    from trainspec.conformance.runner import TargetSession

__all__ = [
    "TrainspecCheckItem",
    "TrainspecTargetCollector",
    "assert_structure_result",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
    "report_outcome",
]

_SESSIONS: Final = pytest.StashKey[list[tuple[str, "TargetSession"]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--trainspec-target`` and ``--trainspec-timeout``."""
    group = parser.getgroup("trainspec", "trainspec conformance kit")
    group.addoption(
        "--trainspec-target",
        action="append",
        default=[],
        metavar="KIND=module:attribute",
        help="run the conformance checks of KIND against the factory or "
        "trainspec.conformance.Target at module:attribute (repeatable)",
    )
    group.addoption(
        "--trainspec-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="fail a conformance check that runs longer than this (default 300; 0 disables)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Load every ``--trainspec-target``; a bad one is a usage error (one line)."""
    specs: list[str] = config.getoption("trainspec_target") or []
    if not specs:
        return
    from trainspec import ConfigurationError
    from trainspec.conformance.runner import TargetSession, load_target

    option: object = config.getoption("trainspec_timeout")
    timeout = option if isinstance(option, (int, float)) else 300.0
    sessions: list[tuple[str, TargetSession]] = []
    for spec in specs:
        kind, sep, location = spec.partition("=")
        if not sep or not kind or not location:
            raise pytest.UsageError(f"--trainspec-target takes KIND=module:attribute; got {spec!r}")
        try:
            target = load_target(kind.strip(), location.strip())
            session = TargetSession(target, timeout_s=None if timeout == 0 else timeout)
        except ConfigurationError as error:
            raise pytest.UsageError(f"--trainspec-target {spec}: {error}") from error
        sessions.append((spec, session))
    config.stash[_SESSIONS] = sessions


def pytest_report_header(config: pytest.Config) -> str:
    """``trainspec 0.1.0, spec 1.0; conformance targets: ...``."""
    specs: list[str] = config.getoption("trainspec_target") or []
    targets = ", ".join(specs) if specs else "none on the command line"
    return (
        f"trainspec {trainspec.__version__}, spec {trainspec.SPEC_VERSION}; conformance "
        f"targets: {targets}"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the items of every ``--trainspec-target`` (before ``-k``/``-m`` deselection)."""
    for spec, target_session in config.stash.get(_SESSIONS, []):
        collector = TrainspecTargetCollector.from_parent(
            session, name=spec, nodeid=spec, target_session=target_session
        )
        # Through the collection hooks, so the terminal counts the items as collected.
        report = collector.ihook.pytest_make_collect_report(collector=collector)
        collector.ihook.pytest_collectreport(report=report)
        items.extend(node for node in report.result if isinstance(node, pytest.Item))


class TrainspecTargetCollector(pytest.Collector):
    """The items of one ``--trainspec-target``: the structure layer, then each check."""

    def __init__(self, *, target_session: TargetSession, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.target_session = target_session

    def collect(self) -> Iterator[TrainspecCheckItem]:
        """One item for the structure layer and one per selected check."""
        yield TrainspecCheckItem.from_parent(self, name="structure", check=None)
        for check in self.target_session.checks:
            yield TrainspecCheckItem.from_parent(
                self, name=f"{check.clause}-{check.name}", check=check
            )


class TrainspecCheckItem(pytest.Item):
    """One conformance check of one target (``check=None``: the structure layer)."""

    def __init__(self, *, check: Check | None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.check = check
        assert isinstance(self.parent, TrainspecTargetCollector)
        self.target_session: TargetSession = self.parent.target_session

    def runtest(self) -> None:
        """Run the check (or the structure layer) and report its verdict to pytest."""
        if self.check is None:
            assert_structure_result(self.target_session)
        else:
            report_outcome(
                self.target_session.result(self.check),
                self.target_session.teardown_result(self.check),
            )

    def reportinfo(self) -> tuple[str, int | None, str]:
        """Where the item comes from, for pytest's output."""
        what = "structure" if self.check is None else f"{self.check.clause} {self.check.name}"
        return str(self.path), None, f"trainspec {self.parent.name if self.parent else ''}: {what}"


def _details(result: CheckResult) -> str:
    clause = f"{result.clause}: {result.clause_title}" if result.clause_title else result.clause
    text = f"[{clause}] {result.check}: {result.message}"
    if result.traceback:
        text += "\n\n" + result.traceback
    return text


def report_outcome(result: CheckResult, lifecycle: CheckResult | None = None) -> None:
    """Turn a verdict into the pytest outcome: return (passed), ``pytest.fail``,
    ``pytest.skip`` or ``pytest.xfail``. ``lifecycle`` is the result filed under the kind's
    lifecycle clause when tearing down the check's instances failed: it fails the test item
    too, after the check's own failure."""
    if lifecycle is not None and lifecycle.status in ("failed", "error", "xpassed"):
        if result.status in ("failed", "error", "xpassed"):
            pytest.fail(_details(result) + "\n\n" + _details(lifecycle), pytrace=False)
        pytest.fail(_details(lifecycle), pytrace=False)
    if result.status == "passed":
        return
    if result.status in ("skipped", "blocked"):
        pytest.skip(f"[{result.clause}] {result.message}")
    if result.status == "xfailed":
        pytest.xfail(f"[{result.clause}] {result.summary_line}")
    pytest.fail(_details(result), pytrace=False)


def assert_structure_result(session: TargetSession) -> None:
    """Fail (with every violation at once) if the structure layer failed."""
    results = session.structure_results()
    lifecycle = session.teardown_result(None)
    failing = [r for r in results if r.status in ("failed", "error", "xpassed")]
    if not failing and lifecycle is not None and lifecycle.status == "failed":
        pytest.fail(_details(lifecycle), pytrace=False)
    if failing:
        pytest.fail(
            f"{session.name} does not match its protocol ({len(failing)} problem"
            f"{'s' if len(failing) != 1 else ''}; every behaviour check is blocked):\n\n"
            + "\n\n".join(_details(r) for r in failing),
            pytrace=False,
        )
    xfailed = [r for r in results if r.status == "xfailed"]
    if xfailed:
        pytest.xfail("; ".join(f"[{r.clause}] {r.summary_line}" for r in xfailed))
