"""Verdicts: raw outcomes plus a target's declarations in, report results out. Pure.

Both executors (the in-process :class:`~trainspec.conformance.runner.TargetSession` and the
N-rank :func:`~trainspec.conformance.distributed.verify_distributed`) only *run* checks and
record a :class:`RawOutcome` per check (passed / failed / skipped / error, with the problems
tearing down the instances it made). Everything a verdict depends on beyond that is decided
here, once, by functions without side effects:

1. **blocking** (:func:`blocked_reason`): when the structure layer failed, every check is
   ``blocked``; a check whose clause already failed in an earlier layer is ``blocked``. An
   executor asks before running a check and does not run a blocked one;
2. **expected failures** (:func:`expect`): ``{clause or check name: reason}`` turn failures
   into ``xfailed``; a declared failure that passes is ``xpassed``. Keyed by a clause, the
   declaration is satisfied when any result of that clause fails;
3. **teardown accounting** (:func:`teardown_results`): a teardown that raised after a check is
   not that check's verdict, it is a failure of the kind's lifecycle clause (``CKPT-12``,
   ``ENV-6``, ...: :attr:`Declarations.lifecycle_clause`), reported as its own result
   ``teardown:<check>`` naming the check whose instance failed to tear down;
4. **the zero-checks rule** (:func:`judge`): a target on which no check beyond the structure
   layer produced a verdict gets a problem, so it is not ``ok``;
5. **clause titles** (:func:`titled`), from the generated clause table.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, cast

from trainspec.conformance.core import LAYERS
from trainspec.conformance.report import FAILING_STATUSES, CheckResult

__all__ = [
    "BLOCKING_STATUSES",
    "STRUCTURE",
    "CheckLike",
    "Declarations",
    "RawOutcome",
    "RawStatus",
    "Verdict",
    "blocked_reason",
    "dependencies",
    "expect",
    "judge",
    "judge_check",
    "judge_structure",
    "judge_teardown",
    "spec_clause",
    "teardown_results",
    "titled",
]

RawStatus = Literal["passed", "failed", "skipped", "error", "blocked"]
"""``blocked``: the executor stopped the check at a call of a member that hung in an earlier
check (the distributed harness); the message names the hang."""
BLOCKING_STATUSES: Final[frozenset[str]] = frozenset({"failed", "error"})
"""Raw statuses that block later layers of the same clause."""
STRUCTURE: Final = "structure"
"""The key of the structure layer's run in the raw outcomes (for its teardown problems)."""


class CheckLike(Protocol):
    """What the verdict needs to know about a check (a :class:`~trainspec.conformance.Check`
    or a planned check of the distributed harness)."""

    @property
    def name(self) -> str: ...
    @property
    def clause(self) -> str: ...
    @property
    def layer(self) -> str: ...


@dataclass(frozen=True)
class RawOutcome:
    """What running one check produced, before any policy.

    ``teardown`` lists the problems tearing down the instances the check made (one line each,
    ``"<Class>.teardown() raised <Error>: <message>"``); it does not change ``status``.
    """

    status: RawStatus
    message: str = ""
    traceback: str = ""
    duration_s: float = 0.0
    teardown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Declarations:
    """What the target declares that the verdict depends on."""

    name: str
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    lifecycle_clause: str = ""
    """The clause a failing teardown breaks for this kind (``""``: the check's own clause)."""


@dataclass(frozen=True)
class Verdict:
    """Every result of a target, in report order, and the problems that fail its run."""

    results: tuple[CheckResult, ...]
    problems: tuple[str, ...]


# -- blocking ---------------------------------------------------------------------------------


def _structure_failures(structure: Sequence[CheckResult]) -> list[str]:
    return [r.check for r in structure if r.status in FAILING_STATUSES]


def _layer_index(layer: str) -> int:
    return LAYERS.index(layer) if layer in LAYERS else len(LAYERS)


def dependencies(check: CheckLike, checks: Sequence[CheckLike]) -> list[CheckLike]:
    """The checks whose raw outcomes ``check``'s verdict depends on: every check of its
    clause (itself included), in layer order. An executor that runs checks lazily runs these
    first, skipping the ones :func:`blocked_reason` blocks."""
    same = [c for c in checks if c.clause == check.clause]
    return sorted(same, key=lambda c: _layer_index(c.layer))


def blocked_reason(
    check: CheckLike,
    checks: Sequence[CheckLike],
    raw: Mapping[str, RawOutcome],
    structure: Sequence[CheckResult],
) -> str | None:
    """Why ``check`` must not run, or ``None``.

    ``raw`` must hold the outcome of every unblocked check of ``check``'s clause in an
    earlier layer (an executor running in layer order has them).
    """
    failed = _structure_failures(structure)
    if failed:
        return f"not run: structure failed ({', '.join(failed)})"
    layer = _layer_index(check.layer)
    for earlier in checks:
        if earlier.clause != check.clause or _layer_index(earlier.layer) >= layer:
            continue
        outcome = raw.get(earlier.name)
        if outcome is None or outcome.status not in BLOCKING_STATUSES:
            continue
        if blocked_reason(earlier, checks, raw, structure) is None:
            return (
                f"not run: {earlier.name} ({earlier.clause}, {earlier.layer} layer) failed; "
                "fix that first"
            )
    return None


# -- expected failures ------------------------------------------------------------------------


def expect(
    result: CheckResult, expected: Mapping[str, str], clause_failed_elsewhere: bool
) -> CheckResult:
    """``result`` after applying ``expected`` (``{clause or check name: reason}``).

    A failure (``failed``/``error``) that is declared becomes ``xfailed``; a declared one that
    passed becomes ``xpassed`` ("remove it"), unless it is declared by clause and
    ``clause_failed_elsewhere`` (another result of the clause failed).
    """
    key = result.check if result.check in expected else result.clause
    reason = expected.get(key)
    if reason is None:
        return result
    if result.status in BLOCKING_STATUSES:
        return dataclasses.replace(
            result,
            status="xfailed",
            message=f"expected failure ({key}: {reason}): {result.message}",
        )
    if result.status == "passed":
        if key == result.clause and clause_failed_elsewhere:
            return result
        return dataclasses.replace(
            result,
            status="xpassed",
            message=f"expected failure {key} ({reason!r}) passed; remove it from expected_failures",
        )
    return result


# -- teardown accounting ----------------------------------------------------------------------


def _teardown_result(
    name: str, layer: str, clause: str, outcome: RawOutcome, decl: Declarations
) -> CheckResult:
    lifecycle = decl.lifecycle_clause or clause
    made_by = "the structure layer" if name == STRUCTURE else name
    return CheckResult(
        f"teardown:{name}",
        lifecycle,
        layer,
        "failed",
        f"{decl.name} must tear down cleanly, without raising and releasing what it set up "
        f"({lifecycle}); got, for the "
        f"instance{'s' if len(outcome.teardown) > 1 else ''} {made_by} made: "
        + "; ".join(outcome.teardown)
        + ". teardown() must be idempotent and safe in any state, whatever the instance went "
        "through.",
    )


def teardown_results(
    checks: Sequence[CheckLike], raw: Mapping[str, RawOutcome], decl: Declarations
) -> list[CheckResult]:
    """One ``failed`` result of the lifecycle clause per run (the structure layer's first,
    then each check's) whose instances failed to tear down; expected failures not applied."""
    found: list[CheckResult] = []
    structure = raw.get(STRUCTURE)
    if structure is not None and structure.teardown:
        found.append(_teardown_result(STRUCTURE, "structure", "", structure, decl))
    for check in checks:
        outcome = raw.get(check.name)
        if outcome is not None and outcome.teardown:
            found.append(_teardown_result(check.name, check.layer, check.clause, outcome, decl))
    return found


# -- results ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _clauses_table() -> Mapping[str, object]:
    try:
        clauses = importlib.import_module("trainspec.conformance.clauses")
    except Exception:  # verdicts work without the clause table, only less chatty
        return {}
    table = getattr(clauses, "CLAUSES", None)
    return cast("Mapping[str, object]", table) if isinstance(table, Mapping) else {}


def spec_clause(clause: str) -> object | None:
    """The entry of ``clause`` in the generated clause table, or ``None``."""
    return _clauses_table().get(clause)


def titled(result: CheckResult) -> CheckResult:
    """``result`` with its clause's title from the spec, when the clause is known."""
    title = getattr(spec_clause(result.clause), "title", None)
    if isinstance(title, str) and title:
        return dataclasses.replace(result, clause_title=title)
    return result


def judge_structure(
    structure: Sequence[CheckResult], decl: Declarations
) -> tuple[CheckResult, ...]:
    """The structure layer's results with expected failures (by check ID or member clause)
    applied and titles added."""
    # Passing structure results carry their protocol's prefix, which no declaration can name,
    # so a clause-keyed declaration never depends on other results here.
    return tuple(titled(expect(r, decl.expected_failures, False)) for r in structure)


def _failed_elsewhere(
    clause: str,
    name: str,
    checks: Sequence[CheckLike],
    raw: Mapping[str, RawOutcome],
    structure: Sequence[CheckResult],
    decl: Declarations,
) -> bool:
    for other in checks:
        if other.clause != clause or other.name == name:
            continue
        outcome = raw.get(other.name)
        if outcome is None or outcome.status not in BLOCKING_STATUSES:
            continue
        if blocked_reason(other, checks, raw, structure) is None:
            return True
    return any(r.clause == clause and r.check != name for r in teardown_results(checks, raw, decl))


def judge_check(
    check: CheckLike,
    checks: Sequence[CheckLike],
    raw: Mapping[str, RawOutcome],
    structure: Sequence[CheckResult],
    decl: Declarations,
) -> CheckResult:
    """The final result of ``check`` (one of ``checks``) from the raw outcomes.

    ``raw`` must hold the outcome of every unblocked check in :func:`dependencies`; a check
    that is neither blocked nor run is an ``error`` (an executor bug, reported not hidden).
    """
    blocked = blocked_reason(check, checks, raw, structure)
    if blocked is not None:
        return titled(CheckResult(check.name, check.clause, check.layer, "blocked", blocked))
    outcome = raw.get(check.name)
    if outcome is None:
        return titled(
            CheckResult(
                check.name,
                check.clause,
                check.layer,
                "error",
                f"{check.name} was neither run nor blocked (a bug in the kit's executor)",
            )
        )
    result = CheckResult(
        check.name,
        check.clause,
        check.layer,
        outcome.status,
        outcome.message,
        outcome.traceback,
        outcome.duration_s,
    )
    elsewhere = _failed_elsewhere(check.clause, check.name, checks, raw, structure, decl)
    return titled(expect(result, decl.expected_failures, elsewhere))


def judge_teardown(
    name: str,
    checks: Sequence[CheckLike],
    raw: Mapping[str, RawOutcome],
    structure: Sequence[CheckResult],
    decl: Declarations,
) -> CheckResult | None:
    """The lifecycle result filed for the run ``name`` (a check's name or :data:`STRUCTURE`)
    when tearing down its instances failed, expected failures applied; else ``None``."""
    for lifecycle in teardown_results(checks, raw, decl):
        if lifecycle.check == f"teardown:{name}":
            elsewhere = _failed_elsewhere(
                lifecycle.clause, lifecycle.check, checks, raw, structure, decl
            )
            return titled(expect(lifecycle, decl.expected_failures, elsewhere))
    return None


def judge(
    checks: Sequence[CheckLike],
    raw: Mapping[str, RawOutcome],
    structure: Sequence[CheckResult],
    decl: Declarations,
    problems: Sequence[str] = (),
    *,
    where: str = "",
) -> Verdict:
    """Every result of a target and its problems (the zero-checks rule added).

    ``structure`` is the structure layer's results before expected failures; ``where``
    qualifies the target in the zero-checks message (``" on 2 ranks"``).
    """
    judged_structure = judge_structure(structure, decl)
    results = [*judged_structure, *(judge_check(c, checks, raw, structure, decl) for c in checks)]
    for name in (STRUCTURE, *(c.name for c in checks)):
        lifecycle = judge_teardown(name, checks, raw, structure, decl)
        if lifecycle is not None:
            results.append(lifecycle)
    found = list(problems)
    structure_failed = any(r.status in FAILING_STATUSES for r in judged_structure)
    executed = sum(
        1 for r in results if r.layer != "structure" and r.status not in ("skipped", "blocked")
    )
    if executed == 0 and not structure_failed and not found:
        skipped = sum(1 for r in results if r.status == "skipped")
        found.append(
            f"no checks ran for {decl.name}{where}: {len(checks)} selected, {skipped} "
            "skipped; a run that checks nothing cannot pass (declare the capabilities the "
            "implementation has, or widen select/layers)"
        )
    return Verdict(tuple(results), tuple(found))
