"""Running the kit: :func:`verify` and the per-target session behind every way in.

:func:`verify` (the Python API), ``trainspec verify`` (the CLI), the pytest plugin and the
pytest suites all drive a :class:`TargetSession`, so they agree on every verdict:

1. the configuration is validated first: capabilities against the kind's vocabulary,
   options against the kind's typed options (parsed to their types once),
   ``expected_failures`` and ``select`` against the IDs the kind's checks use, ``layers``
   against :data:`~trainspec.conformance.core.LAYERS`; anything unknown raises
   :class:`~trainspec.ConfigurationError` naming the valid choices. A class (or factory
   function) may carry its own declarations (:func:`declarations_of`);
2. the structure layer runs on one instance (:mod:`trainspec.conformance.structure`), which
   also tells the structural capabilities the instance has (``isinstance``); if it fails,
   every other check is ``blocked`` ("not run: structure failed"), not failed;
3. the selected checks run in layer order, each on fresh instances from the factory, each
   under a watchdog (``timeout_s``), inside the kind's sandbox (``os.environ`` for cluster
   environments), and every instance the factory made is torn down afterwards
   (``teardown()`` if it has one), even when the check fails.

This module only *runs* checks and records a raw outcome per run; the verdicts (blocking,
expected failures, teardown failures filed under the kind's lifecycle clause, the zero-checks
rule) are :mod:`trainspec.conformance.verdict`'s, shared with the distributed harness.
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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, cast

import trainspec
from trainspec import ConfigurationError
from trainspec.conformance import core, verdict
from trainspec.conformance.capabilities import (
    STRUCTURAL_CAPABILITIES,
    checks_module_name,
    validate_capabilities,
    vocabulary,
)
from trainspec.conformance.core import KINDS, LAYERS, Check, CheckSkipped, Kind
from trainspec.conformance.kinds import (
    coerce_options,
    infer_structural,
    kind_spec,
    parse_options,
)
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
from trainspec.conformance.verdict import STRUCTURE, RawOutcome
from trainspec.reference._messages import describe_value as _describe

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "CAPABILITIES_ATTRIBUTE",
    "DEFAULT_TIMEOUT_S",
    "OPTIONS_ATTRIBUTE",
    "TargetSession",
    "declarations_of",
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
            options=coerce_options(checked, {**base.options, **(options or {})}),
        )
    if not callable(obj):
        raise ConfigurationError(
            f"a {checked} target must be a trainspec.conformance.Target or a zero-argument "
            f"factory (a class or function) returning a fresh instance; got "
            f"{type(obj).__name__} {obj!r:.80}"
        )
    factory = cast("Callable[[], object]", obj)
    declared_capabilities, declared_options = declarations_of(obj)
    return core.Target(
        kind=checked,
        factory=factory,
        name=name,
        capabilities=declared_capabilities | frozenset(capabilities),
        expected_failures=dict(expected_failures or {}),
        options=coerce_options(checked, {**declared_options, **(options or {})}),
    )


CAPABILITIES_ATTRIBUTE: Final = "conformance_capabilities"
"""The attribute of a class (or factory function) naming the behavioural capabilities its
instances have: a collection of names of the kind's vocabulary."""
OPTIONS_ATTRIBUTE: Final = "conformance_options"
"""The attribute of a class (or factory function) giving the options its conformance run
needs: a mapping of option name to value (a string is parsed to the option's type, so
``"package.module:attribute"`` can name a factory without importing it)."""


def declarations_of(obj: object) -> tuple[frozenset[str], dict[str, object]]:
    """The capabilities and options ``obj`` (a class or factory function) declares on itself
    (:data:`CAPABILITIES_ATTRIBUTE`, :data:`OPTIONS_ATTRIBUTE`); empty when it declares none.
    A malformed declaration is a :class:`~trainspec.ConfigurationError`."""
    where = getattr(obj, "__qualname__", type(obj).__name__)
    capabilities: object = getattr(obj, CAPABILITIES_ATTRIBUTE, frozenset())
    options: object = getattr(obj, OPTIONS_ATTRIBUTE, {})
    if isinstance(capabilities, str) or not isinstance(capabilities, (set, frozenset, list, tuple)):
        raise ConfigurationError(
            f"{where}.{CAPABILITIES_ATTRIBUTE} must be a collection of capability names "
            f"(e.g. frozenset({{'local_paths'}})); got {_describe(capabilities)}"
        )
    names = cast("Iterable[object]", capabilities)
    if not all(isinstance(name, str) for name in names):
        raise ConfigurationError(
            f"{where}.{CAPABILITIES_ATTRIBUTE} must hold strings; got {_describe(capabilities)}"
        )
    if not isinstance(options, Mapping) or not all(
        isinstance(key, str) for key in cast("Mapping[object, object]", options)
    ):
        raise ConfigurationError(
            f"{where}.{OPTIONS_ATTRIBUTE} must be a mapping of option name to value; got "
            f"{_describe(options)}"
        )
    return frozenset(cast("Iterable[str]", names)), dict(cast("Mapping[str, object]", options))


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


def _classify(error: BaseException) -> RawOutcome:
    leaves = _leaves(error)
    if all(isinstance(e, CheckSkipped) for e in leaves):
        return RawOutcome("skipped", "; ".join(cast("CheckSkipped", e).reason for e in leaves))
    if all(_is_pytest_skip(e) for e in leaves):
        return RawOutcome("skipped", "; ".join(str(e) for e in leaves))
    if all(isinstance(e, AssertionError) for e in leaves):  # CheckFailure and plain asserts
        message = "\n\n".join(_with_notes(e) for e in leaves)
        return RawOutcome("failed", message, _trimmed_traceback(error))
    return RawOutcome(
        "error",
        f"{type(error).__name__}: {_with_notes(error)}\n(the check raised an exception "
        "instead of a verdict; when the implementation raised it, it likely violates the "
        "clause)",
        _trimmed_traceback(error),
    )


def _run_guarded(body: Callable[[], None], *, name: str, timeout_s: float | None) -> RawOutcome:
    """Run ``body``; pass unless it raises. Under a watchdog thread when ``timeout_s`` is set."""
    start = time.perf_counter()
    if timeout_s is None:
        try:
            body()
            outcome = RawOutcome("passed")
        except (Exception, SystemExit) as error:  # ExceptionGroup is an Exception
            outcome = _classify(error)
        return dataclasses.replace(outcome, duration_s=time.perf_counter() - start)

    box: list[RawOutcome] = []

    def worker() -> None:
        try:
            body()
            box.append(RawOutcome("passed"))
        except BaseException as error:  # the thread must report, whatever happened
            box.append(_classify(error))

    thread = threading.Thread(target=worker, name=f"trainspec-check:{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    elapsed = time.perf_counter() - start
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        return RawOutcome(
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
        distributed: bool = False,
    ) -> None:
        # ``distributed``: also know the checks that run only on a world's ranks (the
        # distributed harness plans with it, so that ``select`` and ``expected_failures`` may
        # name them).
        self._distributed = distributed
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
        # Options are validated and parsed to their types once; the checks get the parsed ones.
        self._running = dataclasses.replace(
            target, options=parse_options(self.kind, target.options)
        )
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
        self._raw: dict[str, RawOutcome] = {}
        self._structure: tuple[CheckResult, ...] | None = None
        self._structure_raw: tuple[CheckResult, ...] = ()
        spec = kind_spec(self.kind)
        self._sandbox = spec.sandbox
        self._declarations = verdict.Declarations(
            name=self.name,
            expected_failures=dict(target.expected_failures),
            lifecycle_clause=spec.lifecycle_clause,
        )
        self._elapsed = 0.0

    # -- configuration ------------------------------------------------------------------------

    def _load_checks(self) -> tuple[list[Check] | None, dict[str, str] | None]:
        module = checks_module_name(self.kind)
        try:
            return core.checks_for(self.kind, distributed=self._distributed), vocabulary(self.kind)
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
        lifecycle = kind_spec(self.kind).lifecycle_clause
        if lifecycle:  # a failing teardown is filed under it, whatever the selected checks
            ids.add(lifecycle)
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
        original = self._running.factory

        def factory() -> object:
            instance = original()
            made.append(instance)
            return instance

        factory.__wrapped__ = original  # type: ignore[attr-defined]  # snippets import it
        tracked = dataclasses.replace(self._running, factory=factory, name=self.name)
        return tracked, made

    def _run_body(self, name: str, body: Callable[[core.Target[object]], None]) -> RawOutcome:
        """Run ``body`` on a target whose instances are tracked and torn down afterwards,
        everything inside the kind's sandbox; the teardown problems go in the outcome."""
        tracked, made = self._tracking_target()
        teardown_problems: list[str] = []
        sandbox = self._sandbox

        def wrapped() -> None:
            with sandbox():
                try:
                    body(tracked)
                finally:
                    teardown_problems.extend(_teardown_all(made))

        outcome = _run_guarded(wrapped, name=name, timeout_s=self.timeout_s)
        self._elapsed += outcome.duration_s
        return dataclasses.replace(outcome, teardown=tuple(teardown_problems))

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
            inferred = infer_structural(self.kind, first)
            capabilities = self.target.capabilities | inferred
            self.protocols = protocols_for(self.kind, capabilities)
            self._running = dataclasses.replace(self._running, capabilities=capabilities)
            second = target.make()
            if first is second:
                fresh_problem.append(
                    f"the factory returned the same {type(first).__qualname__} object twice; "
                    "it must return a fresh instance on every call (each check gets its own)"
                )
            violations_box.append(list(check_structure(first, self.protocols)))

        outcome = self._run_body("structure", body)
        self._raw[STRUCTURE] = RawOutcome("passed", teardown=outcome.teardown)
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
        self._structure_raw = tuple(results)
        self._structure = verdict.judge_structure(results, self._declarations)
        return self._structure

    @property
    def structure_failed(self) -> bool:
        """Whether the structure layer failed (which blocks every other check)."""
        return any(r.status in FAILING_STATUSES for r in self.structure_results())

    def _ensure_run(self, check: Check) -> None:
        """Run what ``check``'s verdict depends on (its clause's checks, in layer order),
        except what is blocked."""
        self.structure_results()
        for needed in verdict.dependencies(check, self.checks):
            if needed.name in self._raw:
                continue
            if verdict.blocked_reason(needed, self.checks, self._raw, self._structure_raw):
                continue
            self._raw[needed.name] = self._run_body(needed.name, cast("Check", needed).run)

    def result(self, check: Check) -> CheckResult:
        """The final verdict for ``check`` (one of :attr:`checks`), running what it needs."""
        self._ensure_run(check)
        return verdict.judge_check(
            check, self.checks, self._raw, self._structure_raw, self._declarations
        )

    def teardown_result(self, check: Check | None) -> CheckResult | None:
        """The lifecycle result filed because tearing down the instances ``check`` made (the
        structure layer's for ``None``) failed, or ``None``; runs what it needs."""
        if check is None:
            self.structure_results()
        else:
            self._ensure_run(check)
        return verdict.judge_teardown(
            STRUCTURE if check is None else check.name,
            self.checks,
            self._raw,
            self._structure_raw,
            self._declarations,
        )

    def report(self) -> TargetReport:
        """Run everything not run yet and return the target's report."""
        self.structure_results()
        for check in self.checks:
            self._ensure_run(check)
        judged = verdict.judge(
            self.checks, self._raw, self._structure_raw, self._declarations, self._problems
        )
        return TargetReport(
            kind=self.kind,
            name=self.name,
            results=judged.results,
            version=discover_version(self.target),
            capabilities=tuple(sorted(self._running.capabilities)),
            expected_failures=dict(self.target.expected_failures),
            problems=judged.problems,
            duration_s=self._elapsed,
        )


def _spec_clause(key: str) -> object | None:
    return verdict.spec_clause(key)


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
