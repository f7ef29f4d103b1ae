"""pytest mixins: the whole conformance kit for one implementation in one class.

::

    from trainspec.conformance.suites import CheckpointIOSuite

    class TestMyCheckpointIO(CheckpointIOSuite):
        factory = MyCheckpointIO                     # a zero-argument callable, fresh per call
        capabilities = {"fsspec"}                    # optional behaviour it declares
        expected_failures = {"CKPT-3": "atomic rename is not available on our store"}

Each suite contributes one test, ``test_conformance``, parametrised with one case per check
(``test_conformance[CKPT-3-check_checkpoint_io_save_is_atomic]``) plus
``test_conformance[structure]`` for the structure layer, so ``-k CKPT-3`` selects by clause.
Instead of the class attributes, a class may define a ``trainspec_target`` fixture returning
a :class:`~trainspec.conformance.Target` (class scope avoids re-running the structure layer).

The mixins are not named ``Test*``, so pytest never collects them on their own. A class that
sets neither ``factory`` nor the fixture fails loudly, saying what to provide.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, ClassVar, Final

import pytest

from trainspec import ConfigurationError
from trainspec.conformance.core import Kind, Target, checks_for
from trainspec.conformance.pytest_plugin import assert_structure_result, report_outcome
from trainspec.conformance.runner import DEFAULT_TIMEOUT_S, TargetSession, make_target

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

__all__ = [
    "AcceleratorSuite",
    "AsyncCheckpointIOSuite",
    "CheckpointIOSuite",
    "ClusterEnvironmentSuite",
    "CollectiveSuite",
    "ConformanceSuite",
    "LauncherSuite",
    "PrecisionSuite",
    "StrategySuite",
]

_STRUCTURE: Final = "structure"
_SESSIONS: Final = pytest.StashKey[dict[str, list[TargetSession]]]()


class ConformanceSuite:
    """Base of the per-kind suites; use one of its subclasses.

    Class attributes a test class sets:

    ``factory``
        **Required** unless the class defines a ``trainspec_target`` fixture: a zero-argument
        callable (a class, a function, ``functools.partial``, or a ``def factory(self)``
        method) that returns a fresh, un-set-up instance on every call.
    ``capabilities``
        Names of the optional behaviour the implementation declares (the kind's vocabulary
        is in :mod:`trainspec.conformance.capabilities`).
    ``expected_failures``
        ``{clause or check name: reason}``; reported as xfail, and a declared failure that
        passes fails.
    ``options``
        Kind-specific target options.
    ``select`` / ``layers``
        Restrict the checks (clause IDs or check names / layers after structure).
    ``timeout_s``
        The per-check watchdog in seconds (``None``: no watchdog).
    """

    kind: ClassVar[Kind]
    implied_capabilities: ClassVar[frozenset[str]] = frozenset()
    factory: ClassVar[Callable[[], object] | None] = None
    capabilities: ClassVar[Collection[str]] = frozenset()
    expected_failures: ClassVar[Mapping[str, str]] = {}
    options: ClassVar[Mapping[str, object]] = {}
    select: ClassVar[Collection[str] | None] = None
    layers: ClassVar[Collection[str] | None] = None
    timeout_s: ClassVar[float | None] = DEFAULT_TIMEOUT_S

    def _factory(self) -> Callable[[], object] | None:
        raw = inspect.getattr_static(type(self), "factory", None)
        if isinstance(raw, staticmethod):
            return raw.__func__
        if inspect.isfunction(raw):
            params = [
                p
                for p in inspect.signature(raw).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            bound: Callable[[], object] = raw.__get__(self) if params else raw
            return bound
        return raw if callable(raw) else None

    @pytest.fixture
    def trainspec_target(self) -> Target[object]:
        """The target built from the class attributes; override to build it yourself."""
        factory = self._factory()
        if factory is None:
            pytest.fail(
                f"{type(self).__name__} must say what to verify: set the class attribute "
                "`factory = MyImplementation` (a zero-argument callable returning a fresh "
                "instance) or define a `trainspec_target` fixture returning "
                f"trainspec.conformance.Target({self.kind!r}, ...)",
                pytrace=False,
            )
        return make_target(
            self.kind,
            factory,
            name=f"{type(self).__module__}.{type(self).__qualname__}",
            capabilities=frozenset(self.capabilities) | self.implied_capabilities,
            expected_failures=dict(self.expected_failures),
            options=dict(self.options),
        )

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One ``test_conformance`` case per check of the suite's kind."""
        if "trainspec_check" not in metafunc.fixturenames:
            return
        layers = set(self.layers) if self.layers is not None else None
        wanted = set(self.select) if self.select is not None else None
        ids = [_STRUCTURE]
        for check in checks_for(self.kind):
            if check.layer == "structure" or (layers is not None and check.layer not in layers):
                continue
            if wanted is not None and not {check.name, check.clause} & wanted:
                continue
            ids.append(f"{check.clause}-{check.name}")
        metafunc.parametrize("trainspec_check", ids, ids=ids)

    def _session(self, request: pytest.FixtureRequest, target: Target[object]) -> TargetSession:
        if target.kind != self.kind:
            pytest.fail(
                f"{type(self).__name__} verifies {self.kind!r} targets; trainspec_target "
                f"returned a {target.kind!r} target",
                pytrace=False,
            )
        target = make_target(self.kind, target, capabilities=self.implied_capabilities)
        cache = request.config.stash.setdefault(_SESSIONS, {})
        key = f"{type(self).__module__}.{type(self).__qualname__}"
        for session in cache.get(key, []):
            if session.target == target:
                return session
        try:
            session = TargetSession(
                target,
                layers=None if self.layers is None else ["structure", *self.layers],
                select=self.select,
                timeout_s=self.timeout_s,
            )
        except ConfigurationError as error:
            pytest.fail(f"{type(self).__name__} is misconfigured: {error}", pytrace=False)
        cache.setdefault(key, []).append(session)
        return session

    def test_conformance(
        self,
        trainspec_target: Target[object],
        trainspec_check: str,
        request: pytest.FixtureRequest,
    ) -> None:
        """Run one conformance check (or the structure layer) on the suite's target."""
        session = self._session(request, trainspec_target)
        if trainspec_check == _STRUCTURE:
            assert_structure_result(session)
            return
        by_id = {f"{c.clause}-{c.name}": c for c in session.checks}
        check = by_id.get(trainspec_check)
        if check is None:
            pytest.fail(f"no check {trainspec_check!r} for this target", pytrace=False)
        report_outcome(session.result(check), session.teardown_result(check))


class AcceleratorSuite(ConformanceSuite):
    """Every check of :class:`trainspec.Accelerator` (ACC-*)."""

    kind = "accelerator"


class PrecisionSuite(ConformanceSuite):
    """Every check of :class:`trainspec.Precision` (PREC-*)."""

    kind = "precision"


class CheckpointIOSuite(ConformanceSuite):
    """Every check of :class:`trainspec.CheckpointIO` (CKPT-*)."""

    kind = "checkpoint_io"


class AsyncCheckpointIOSuite(ConformanceSuite):
    """Every check of :class:`trainspec.AsyncCheckpointIO`: CKPT-* plus ACKPT-* (declares the
    ``async`` capability for you)."""

    kind = "checkpoint_io"
    implied_capabilities = frozenset({"async"})


class CollectiveSuite(ConformanceSuite):
    """Every check of :class:`trainspec.Collective` (COLL-*)."""

    kind = "collective"


class ClusterEnvironmentSuite(ConformanceSuite):
    """Every check of :class:`trainspec.ClusterEnvironment` (ENV-*)."""

    kind = "cluster_environment"


class LauncherSuite(ConformanceSuite):
    """Every check of :class:`trainspec.Launcher` (LAUNCH-*)."""

    kind = "launcher"


class StrategySuite(ConformanceSuite):
    """Every check of :class:`trainspec.Strategy` (STRAT-*, plus SYNC/SHARD/STEP for declared
    capabilities)."""

    kind = "strategy"
