"""Running the kit: :func:`verify` and the per-target session behind every way in.

:func:`verify` (the Python API), ``trainspec verify`` (the CLI), the pytest plugin and the
pytest suites all drive a :class:`TargetSession`, so they agree on every verdict:

1. the configuration is validated first: capabilities against the kind's vocabulary,
   ``expected_failures`` and ``select`` against the IDs the kind's checks use, ``layers``
   against :data:`~trainspec.conformance.core.LAYERS`; anything unknown raises
   :class:`~trainspec.ConfigurationError` naming the valid choices;
2. the structure layer runs on one instance (:mod:`trainspec.conformance.structure`); if it
   fails, every other check is ``blocked`` ("not run: structure failed"), not failed;
3. the selected checks run in layer order, each on fresh instances from the factory, each
   under a watchdog (``timeout_s``), and every instance the factory made is torn down
   afterwards (``teardown()`` if it has one), even when the check fails; a check in a later
   layer whose clause already failed in an earlier layer is ``blocked``;
4. ``expected_failures`` (``{clause or check name: reason}``) turn failures into ``xfailed``;
   a declared failure that passes is ``xpassed``, which fails the run ("remove it"). Keyed by
   a clause, the declaration is satisfied when any check of that clause fails;
5. a target on which no check beyond the structure layer produced a verdict is not ``ok``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

import trainspec
from trainspec import ConfigurationError
from trainspec.conformance import core
from trainspec.conformance.capabilities import (
    STRUCTURAL_CAPABILITIES,
    checks_module_name,
    validate_capabilities,
    vocabulary,
)
from trainspec.conformance.core import KINDS, LAYERS, Check, CheckSkipped, Kind
from trainspec.conformance.report import (
    FAILING_STATUSES,
    CheckResult,
    Environment,
    Report,
    Status,
    TargetReport,
)
from trainspec.conformance.structure import (
    KIND_PROTOCOLS,
    Violation,
    check_structure,
    protocol_clause_prefix,
    protocol_members,
    protocols_for,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TargetSession",
    "discover_version",
    "load_object",
    "load_target",
    "make_target",
    "verify",
]

DEFAULT_TIMEOUT_S: Final = 300.0
"""Per-check watchdog default, in seconds."""

_INTERNAL_FILES: Final = frozenset({__file__, core.__file__})
_BLOCKING: Final[frozenset[Status]] = frozenset({"failed", "error"})


# -- targets -------------------------------------------------------------------------------------


def _check_kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ConfigurationError(f"unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return kind


def load_object(spec: str) -> object:
    """The object named by ``"package.module:attribute"`` (the attribute may be dotted).

    Raises :class:`~trainspec.ConfigurationError` with one line naming the problem for a
    malformed spec, a module that cannot be imported (with the import error) or a missing
    attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"target {spec!r} must be 'package.module:attribute' (for example "
            "'my_plugin.io:MyCheckpointIO')"
        )
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as error:
        raise ConfigurationError(
            f"cannot import module {module_name!r} for target {spec!r}: "
            f"{type(error).__name__}: {error}"
        ) from error
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as error:
            raise ConfigurationError(
                f"target {spec!r}: {type(obj).__name__} {getattr(obj, '__name__', '?')!r} has "
                f"no attribute {part!r}"
            ) from error
    return obj


def make_target(
    kind: str,
    obj: object,
    *,
    name: str = "",
    capabilities: Iterable[str] = (),
    expected_failures: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
) -> core.Target[object]:
    """A :class:`~trainspec.conformance.Target` of ``kind`` from ``obj``.

    ``obj`` is a Target (its kind must be ``kind``; ``capabilities`` are added to its own,
    ``expected_failures`` and ``options`` override its entries) or a zero-argument callable
    returning a fresh instance (a class or a factory function). Raises
    :class:`~trainspec.ConfigurationError` for anything else.
    """
    checked = _check_kind(kind)
    if isinstance(capabilities, str):
        raise ConfigurationError(
            f"capabilities must be a collection of names, not the string {capabilities!r}"
        )
    if isinstance(obj, core.Target):
        base = cast("core.Target[object]", obj)
        if base.kind != checked:
            raise ConfigurationError(
                f"target {base.display_name!r} is a {base.kind!r} target, not {checked!r}"
            )
        return dataclasses.replace(
            base,
            name=name or base.name,
            capabilities=base.capabilities | frozenset(capabilities),
            expected_failures={**base.expected_failures, **(expected_failures or {})},
            options={**base.options, **(options or {})},
        )
    if not callable(obj):
        raise ConfigurationError(
            f"a {checked} target must be a trainspec.conformance.Target or a zero-argument "
            f"factory (a class or function) returning a fresh instance; got "
            f"{type(obj).__name__} {obj!r:.80}"
        )
    factory = cast("Callable[[], object]", obj)
    return core.Target(
        kind=checked,
        factory=factory,
        name=name,
        capabilities=frozenset(capabilities),
        expected_failures=dict(expected_failures or {}),
        options=dict(options or {}),
    )


def load_target(
    kind: str,
    spec: str,
    *,
    capabilities: Iterable[str] = (),
    expected_failures: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
) -> core.Target[object]:
    """:func:`make_target` on :func:`load_object` of ``spec`` (``"module:attribute"``)."""
    _check_kind(kind)
    obj = load_object(spec)
    return make_target(
        kind,
        obj,
        name="" if isinstance(obj, core.Target) else spec,
        capabilities=capabilities,
        expected_failures=expected_failures,
        options=options,
    )


def discover_version(target: core.Target[object]) -> str | None:
    """The version of the distribution that provides ``target``'s factory, if it can be found.

    Looks at the factory's top-level package: ``trainspec`` itself, a ``__version__`` string,
    then the installed distributions. ``None`` when nothing says.
    """
    factory: object = target.factory
    factory = getattr(factory, "func", factory)  # functools.partial
    module_name = getattr(factory, "__module__", None)
    if not isinstance(module_name, str) or not module_name:
        return None
    top = module_name.partition(".")[0]
    if top == "trainspec":
        return trainspec.__version__
    declared = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(declared, str):
        return declared
    try:  # the distribution is usually named after its package
        return importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        pass
    except Exception:  # broken metadata must not break a report
        return None
    try:
        for dist in _packages_distributions().get(top, []):
            return importlib.metadata.version(dist)
    except Exception:
        return None
    return None


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> Mapping[str, list[str]]:
    # Reads every installed distribution's file list (a second or so with torch): once.
    return importlib.metadata.packages_distributions()


# -- running one callable --------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    status: Status
    message: str = ""
    traceback: str = ""
    duration_s: float = 0.0


def _trimmed_traceback(error: BaseException) -> str:
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _INTERNAL_FILES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _with_notes(error: BaseException) -> str:
    text = str(error)
    notes = getattr(error, "__notes__", None)  # hypothesis puts the falsifying example here
    if isinstance(notes, list) and notes:
        text += "\n" + "\n".join(str(n) for n in notes)
    return text


def _leaves(error: BaseException) -> list[BaseException]:
    # Exception groups (3.11+) from hypothesis or task groups: judge by their leaves.
    sub_errors = getattr(error, "exceptions", None)
    if isinstance(sub_errors, tuple) and type(error).__name__.endswith("ExceptionGroup"):
        return [
            leaf for sub in sub_errors if isinstance(sub, BaseException) for leaf in _leaves(sub)
        ]
    return [error]


def _is_pytest_skip(error: BaseException) -> bool:
    # pytest.skip() inside a check; recognised without importing pytest.
    return type(error).__name__ == "Skipped" and type(error).__module__ == "_pytest.outcomes"


def _classify(error: BaseException) -> _Outcome:
    leaves = _leaves(error)
    if all(isinstance(e, CheckSkipped) for e in leaves):
        return _Outcome("skipped", "; ".join(cast("CheckSkipped", e).reason for e in leaves))
    if all(_is_pytest_skip(e) for e in leaves):
        return _Outcome("skipped", "; ".join(str(e) for e in leaves))
    if all(isinstance(e, AssertionError) for e in leaves):  # CheckFailure and plain asserts
        message = "\n\n".join(_with_notes(e) for e in leaves)
        return _Outcome("failed", message, _trimmed_traceback(error))
    return _Outcome(
        "error",
        f"{type(error).__name__}: {_with_notes(error)}\n(the check raised an exception "
        "instead of a verdict; when the implementation raised it, it likely violates the "
        "clause)",
        _trimmed_traceback(error),
    )


def _run_guarded(body: Callable[[], None], *, name: str, timeout_s: float | None) -> _Outcome:
    """Run ``body``; pass unless it raises. Under a watchdog thread when ``timeout_s`` is set."""
    start = time.perf_counter()
    if timeout_s is None:
        try:
            body()
            outcome = _Outcome("passed")
        except (Exception, SystemExit) as error:  # ExceptionGroup is an Exception
            outcome = _classify(error)
        return dataclasses.replace(outcome, duration_s=time.perf_counter() - start)

    box: list[_Outcome] = []

    def worker() -> None:
        try:
            body()
            box.append(_Outcome("passed"))
        except BaseException as error:  # the thread must report, whatever happened
            box.append(_classify(error))

    thread = threading.Thread(target=worker, name=f"trainspec-check:{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    elapsed = time.perf_counter() - start
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        return _Outcome(
            "failed",
            f"{name} did not finish within {timeout_s:g} s (timeout_s); a hang is a "
            "failure. The check's thread is left running; its stack is in the traceback.",
            stack,
            elapsed,
        )
    return dataclasses.replace(box[0], duration_s=elapsed)


def _teardown_all(instances: Sequence[object]) -> list[str]:
    problems: list[str] = []
    for instance in reversed(instances):
        teardown = getattr(instance, "teardown", None)
        if not callable(teardown):
            continue
        try:
            teardown()
        except Exception as error:
            problems.append(
                f"{type(instance).__qualname__}.teardown() raised {type(error).__name__}: {error}"
            )
    return problems


# -- the session -------------------------------------------------------------------------------


def _valid_timeout(timeout_s: object) -> bool:
    """Whether ``timeout_s`` is a number ``thread.join`` takes: finite, in
    ``(0, threading.TIMEOUT_MAX]`` (``nan`` and ``inf`` make it raise)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        return False
    try:
        seconds = float(timeout_s)
    except OverflowError:  # an int beyond float range
        return False
    return math.isfinite(seconds) and 0 < seconds <= threading.TIMEOUT_MAX


def _describe(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a message: cut after ``limit`` characters, never raising."""
    try:
        text = repr(value)
    except Exception as error:  # an int of over 4300 digits, a broken __repr__
        return f"<{type(value).__name__} whose repr raises {type(error).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


class TargetSession:
    """Verifies one target, running each check at most once and caching the verdicts.

    Construction validates the configuration (raising
    :class:`~trainspec.ConfigurationError`) but runs nothing. :meth:`structure_results` and
    :meth:`result` run what they need lazily, so the pytest layers can run one check per test
    item and still get the verdicts :meth:`report` gives.

    Not thread-safe: use one session from one thread.
    """

    def __init__(
        self,
        target: core.Target[object],
        *,
        layers: Iterable[str] | None = None,
        select: Iterable[str] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.target = target
        self.kind: Kind = _check_kind(target.kind)
        self.timeout_s = timeout_s
        self.name = target.display_name
        if timeout_s is not None and not _valid_timeout(timeout_s):
            raise ConfigurationError(
                f"timeout_s must be positive and finite, at most {threading.TIMEOUT_MAX:.0f} "
                f"seconds, or None (no watchdog); got {_describe(timeout_s)}"
            )
        if isinstance(layers, str):
            raise ConfigurationError(f"layers must be a collection, not the string {layers!r}")
        chosen_layers = tuple(LAYERS) if layers is None else tuple(layers)
        unknown_layers = [layer for layer in chosen_layers if layer not in LAYERS]
        if unknown_layers:
            raise ConfigurationError(
                f"unknown layer {unknown_layers[0]!r}; valid layers: {', '.join(LAYERS)}"
            )
        self._problems: list[str] = []
        all_checks, known_capabilities = self._load_checks()
        self.protocols = protocols_for(self.kind, target.capabilities)
        if known_capabilities is not None:
            validate_capabilities(self.kind, target.capabilities, known_capabilities)
        for key, reason in target.expected_failures.items():
            if not isinstance(reason, str) or not reason.strip():
                raise ConfigurationError(
                    f"expected failure {key!r} needs a reason (a non-empty string saying why "
                    f"it fails); got {reason!r}"
                )
        if all_checks is not None:
            self._validate_ids("expected_failures", target.expected_failures, all_checks)
        selected = [
            c for c in (all_checks or []) if c.layer in chosen_layers and c.layer != "structure"
        ]
        if select is not None:
            if isinstance(select, str):
                raise ConfigurationError(
                    f"select must be a collection of IDs, not the string {select!r}"
                )
            wanted = set(select)
            if all_checks is not None:
                self._validate_ids("select", wanted, all_checks)
            selected = [c for c in selected if c.name in wanted or c.clause in wanted]
        self.checks: tuple[Check, ...] = tuple(selected)
        self._raw: dict[str, _Outcome] = {}
        self._structure: tuple[CheckResult, ...] | None = None
        self._elapsed = 0.0

    # -- configuration ------------------------------------------------------------------------

    def _load_checks(self) -> tuple[list[Check] | None, dict[str, str] | None]:
        module = checks_module_name(self.kind)
        try:
            return core.checks_for(self.kind), vocabulary(self.kind)
        except ModuleNotFoundError as error:
            if error.name != module:
                self._problems.append(f"importing {module} failed: {type(error).__name__}: {error}")
                return None, None
            self._problems.append(
                f"no behaviour checks are installed for kind {self.kind!r} ({module} not found)"
            )
            structural = STRUCTURAL_CAPABILITIES.get(self.kind, {})
            return [], {name: cap.description for name, cap in structural.items()}
        except Exception as error:  # a broken checks module is a kit bug: report, do not crash
            self._problems.append(f"importing {module} failed: {type(error).__name__}: {error}")
            return None, None

    def _structure_ids(self) -> set[str]:
        ids: set[str] = set()
        optional = STRUCTURAL_CAPABILITIES.get(self.kind, {}).values()
        for protocol in (KIND_PROTOCOLS[self.kind], *(cap.protocol for cap in optional)):
            ids.add(f"structure:{protocol.__name__}")
            for member in protocol_members(protocol):
                ids.add(f"structure:{protocol.__name__}.{member.name}")
                ids.update(member.clauses)
        ids.add("structure:factory")
        return ids

    def _validate_ids(self, what: str, keys: Iterable[str], checks: Sequence[Check]) -> None:
        clauses = {c.clause for c in checks}
        names = {c.name for c in checks}
        valid = clauses | names | self._structure_ids()
        for key in keys:
            if key in valid:
                continue
            hint = _suggest(key, valid)
            spec_note = ""
            clause = _spec_clause(key)
            if clause is not None:
                spec_note = f" ({key} is a spec clause, but no {self.kind} check enforces it)"
            listed = ", ".join(sorted(clauses, key=_clause_sort_key)) or "none"
            raise ConfigurationError(
                f"unknown clause or check ID {key!r} in {what}{spec_note}{hint}; valid for "
                f"kind {self.kind!r}: the clauses {listed}, a check name (e.g. "
                f"{min(names) if names else 'check_<kind>_<rule>'}) or a structure ID "
                "(structure:<Protocol>.<member>)"
            )

    # -- running -------------------------------------------------------------------------------

    def _tracking_target(self) -> tuple[core.Target[object], list[object]]:
        made: list[object] = []
        original = self.target.factory

        def factory() -> object:
            instance = original()
            made.append(instance)
            return instance

        tracked = dataclasses.replace(self.target, factory=factory, name=self.name)
        return tracked, made

    def _run_body(
        self,
        name: str,
        body: Callable[[core.Target[object]], None],
        *,
        judge_teardown: bool = True,
    ) -> _Outcome:
        tracked, made = self._tracking_target()
        teardown_problems: list[str] = []

        def wrapped() -> None:
            try:
                body(tracked)
            finally:
                teardown_problems.extend(_teardown_all(made))

        outcome = _run_guarded(wrapped, name=name, timeout_s=self.timeout_s)
        self._elapsed += outcome.duration_s
        if teardown_problems and judge_teardown:
            note = "cleanup after the check: " + "; ".join(teardown_problems)
            if outcome.status == "passed":
                return _Outcome(
                    "error",
                    f"the check passed, but tearing down the instances it made failed: {note}. "
                    "teardown() must be idempotent and safe in any state.",
                    "",
                    outcome.duration_s,
                )
            return dataclasses.replace(outcome, message=f"{outcome.message}\n({note})")
        return outcome

    def structure_results(self) -> tuple[CheckResult, ...]:
        """The structure layer's results (run once): one passed result per protocol that
        matches, else one failed result per violating member."""
        if self._structure is not None:
            return self._structure
        base_prefix = protocol_clause_prefix(self.protocols[0])
        violations_box: list[list[Violation]] = []
        fresh_problem: list[str] = []

        def body(target: core.Target[object]) -> None:
            first = target.make()
            second = target.make()
            if first is second:
                fresh_problem.append(
                    f"the factory returned the same {type(first).__qualname__} object twice; "
                    "it must return a fresh instance on every call (each check gets its own)"
                )
            violations_box.append(list(check_structure(first, self.protocols)))

        # Teardown behaviour is judged by the behaviour checks of its clause, not here.
        outcome = self._run_body("structure", body, judge_teardown=False)
        results: list[CheckResult] = []
        if outcome.status != "passed":
            message = outcome.message
            if outcome.status == "error":
                message = f"calling the factory or inspecting its instance failed: {message}"
            results.append(
                CheckResult(
                    "structure:factory",
                    base_prefix,
                    "structure",
                    "failed" if outcome.status == "failed" else "error",
                    message,
                    outcome.traceback,
                    outcome.duration_s,
                )
            )
        else:
            violations = violations_box[0]
            if fresh_problem:
                results.append(
                    CheckResult(
                        "structure:factory",
                        base_prefix,
                        "structure",
                        "failed",
                        f"{self.name} {fresh_problem[0]}",
                    )
                )
            share = outcome.duration_s / max(1, len(self.protocols))
            for protocol in self.protocols:
                mine = [v for v in violations if v.protocol is protocol]
                if not mine:
                    results.append(
                        CheckResult(
                            f"structure:{protocol.__name__}",
                            protocol_clause_prefix(protocol),
                            "structure",
                            "passed",
                            duration_s=share,
                        )
                    )
                for violation in mine:
                    results.append(
                        CheckResult(
                            f"structure:{protocol.__name__}.{violation.member}",
                            violation.clause,
                            "structure",
                            "failed",
                            violation.message,
                        )
                    )
        # Structure results pass under their protocol's prefix, which is not an ID that
        # expected_failures accepts, so a clause-keyed declaration never needs other results.
        self._structure = tuple(_titled(self._expect(r, lambda _clause: False)) for r in results)
        return self._structure

    @property
    def structure_failed(self) -> bool:
        """Whether the structure layer failed (which blocks every other check)."""
        return any(r.status in FAILING_STATUSES for r in self.structure_results())

    def _raw_outcome(self, check: Check) -> _Outcome:
        if check.name not in self._raw:
            self._raw[check.name] = self._run_body(check.name, check.run)
        return self._raw[check.name]

    def _blocked_by(self, check: Check) -> str | None:
        if self.structure_failed:
            failed = [r.check for r in self.structure_results() if r.status in FAILING_STATUSES]
            return f"not run: structure failed ({', '.join(failed)})"
        layer = LAYERS.index(check.layer)
        for earlier in self.checks:
            if earlier.clause != check.clause or LAYERS.index(earlier.layer) >= layer:
                continue
            if self._blocked_by(earlier) is None and self._raw_outcome(earlier).status in _BLOCKING:
                return (
                    f"not run: {earlier.name} ({earlier.clause}, {earlier.layer} layer) failed; "
                    "fix that first"
                )
        return None

    def _clause_failed_elsewhere(self, clause: str, name: str) -> bool:
        for other in self.checks:
            if other.clause == clause and other.name != name and self._blocked_by(other) is None:
                if self._raw_outcome(other).status in _BLOCKING:
                    return True
        return False

    def _expect(self, result: CheckResult, failed_elsewhere: Callable[[str], bool]) -> CheckResult:
        expected = self.target.expected_failures
        key = result.check if result.check in expected else result.clause
        reason = expected.get(key)
        if reason is None:
            return result
        if result.status in _BLOCKING:
            return dataclasses.replace(
                result,
                status="xfailed",
                message=f"expected failure ({key}: {reason}): {result.message}",
            )
        if result.status == "passed":
            if key == result.clause and failed_elsewhere(key):
                return result
            return dataclasses.replace(
                result,
                status="xpassed",
                message=(
                    f"expected failure {key} ({reason!r}) passed; remove it from expected_failures"
                ),
            )
        return result

    def result(self, check: Check) -> CheckResult:
        """The final verdict for ``check`` (one of :attr:`checks`), running what it needs."""
        blocked = self._blocked_by(check)
        if blocked is not None:
            return _titled(CheckResult(check.name, check.clause, check.layer, "blocked", blocked))
        raw = self._raw_outcome(check)
        result = CheckResult(
            check.name,
            check.clause,
            check.layer,
            raw.status,
            raw.message,
            raw.traceback,
            raw.duration_s,
        )
        return _titled(
            self._expect(result, lambda clause: self._clause_failed_elsewhere(clause, check.name))
        )

    def report(self) -> TargetReport:
        """Run everything not run yet and return the target's report."""
        results = [*self.structure_results(), *(self.result(c) for c in self.checks)]
        problems = list(self._problems)
        executed = sum(
            1 for r in results if r.layer != "structure" and r.status not in ("skipped", "blocked")
        )
        if executed == 0 and not self.structure_failed and not problems:
            skipped = sum(1 for r in results if r.status == "skipped")
            problems.append(
                f"no checks ran for {self.name}: {len(self.checks)} selected, {skipped} "
                "skipped; a run that checks nothing cannot pass (declare the capabilities the "
                "implementation has, or widen select/layers)"
            )
        return TargetReport(
            kind=self.kind,
            name=self.name,
            results=tuple(results),
            version=discover_version(self.target),
            capabilities=tuple(sorted(self.target.capabilities)),
            expected_failures=dict(self.target.expected_failures),
            problems=tuple(problems),
            duration_s=self._elapsed,
        )


@functools.lru_cache(maxsize=1)
def _clauses_table() -> Mapping[str, object]:
    try:
        clauses = importlib.import_module("trainspec.conformance.clauses")
    except Exception:  # the runner works without the clause table, only less chatty
        return {}
    table = getattr(clauses, "CLAUSES", None)
    return cast("Mapping[str, object]", table) if isinstance(table, Mapping) else {}


def _spec_clause(key: str) -> object | None:
    return _clauses_table().get(key)


def _titled(result: CheckResult) -> CheckResult:
    clause = _spec_clause(result.clause)
    title = getattr(clause, "title", None)
    if isinstance(title, str) and title:
        return dataclasses.replace(result, clause_title=title)
    return result


def _clause_sort_key(clause: str) -> tuple[str, int]:
    prefix, _, number = clause.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (clause, 0)


def verify(
    target: core.Target[object] | tuple[str, Callable[[], object]],
    *,
    capabilities: Iterable[str] = (),
    expected_failures: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
    layers: Iterable[str] | None = None,
    select: Iterable[str] | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> Report:
    """Run the conformance kit on one implementation and return its :class:`Report`.

    ``target`` is a :class:`~trainspec.conformance.Target` or a ``(kind, factory)`` pair;
    ``capabilities`` are added to the target's, ``expected_failures`` (``{clause or check
    name: reason}``) and ``options`` override its entries. ``layers`` limits the layers after
    the structure layer, which always runs; ``select`` keeps only checks whose clause or name
    is listed. ``timeout_s`` bounds each check (a watchdog thread; ``None`` runs checks in the
    calling thread without one); it **must** be ``None`` or a finite number of seconds in
    ``(0, threading.TIMEOUT_MAX]``.

    Raises :class:`~trainspec.ConfigurationError` (before running anything) for an unknown
    kind, capability, layer or ID; every verdict about the implementation is in the report,
    never an exception. ``report.ok`` says whether it conforms.
    """
    if isinstance(target, core.Target):
        resolved = make_target(
            target.kind,
            target,
            capabilities=capabilities,
            expected_failures=expected_failures,
            options=options,
        )
    else:
        kind, factory = target
        resolved = make_target(
            kind,
            factory,
            capabilities=capabilities,
            expected_failures=expected_failures,
            options=options,
        )
    session = TargetSession(resolved, layers=layers, select=select, timeout_s=timeout_s)
    return Report(targets=(session.report(),), environment=Environment.current())
