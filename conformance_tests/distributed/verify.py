"""``verify_distributed``: the conformance kit on N ranks, as a :class:`Report`.

The same report as :func:`trainspec.conformance.verify`, made in a
:class:`~trainspec.conformance.distributed.World`:

1. rank 0 validates the configuration with the kit's runner (capabilities, expected
   failures, ``select``) and runs the structure layer; a
   :class:`~trainspec.ConfigurationError` there is raised here, before anything else runs;
2. every selected check of the kind's behaviour layer (written for any world size), then the
   distributed and end-to-end checks of :mod:`trainspec.conformance.distributed.checks`, runs
   on every rank, in layer order; a structure failure blocks everything, and a check whose
   clause failed in an earlier layer is ``blocked``;
3. ``expected_failures`` turn failures into ``xfailed`` (a declared failure that passes is
   ``xpassed``), and a run in which no check produced a verdict is not ``ok``.

A hung or crashed check is a result like any other (``failed`` / ``error`` with every rank's
stack or stderr in its traceback); the world restarts and the run goes on.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Mapping
from typing import Final, cast

from trainspec.conformance.core import LAYERS
from trainspec.conformance.distributed.spec import TargetSpec
from trainspec.conformance.distributed.world import DEFAULT_CHECK_TIMEOUT_S, World
from trainspec.conformance.report import (
    FAILING_STATUSES,
    CheckResult,
    Environment,
    Report,
    TargetReport,
)
from trainspec.errors import ConfigurationError

__all__ = ["DEFAULT_LAYERS", "DISTRIBUTED_KINDS", "verify_distributed"]

DISTRIBUTED_KINDS: Final = ("collective", "strategy")
"""The kinds whose checks mean something on several ranks."""
DEFAULT_LAYERS: Final = ("behaviour", "distributed", "end_to_end")
"""The layers run on the ranks (the structure layer always runs, on rank 0)."""

_BLOCKING: Final = frozenset({"failed", "error"})


def _layers(layers: Iterable[str] | None) -> tuple[str, ...]:
    if layers is None:
        return DEFAULT_LAYERS
    if isinstance(layers, str):
        raise ConfigurationError(f"layers must be a collection, not the string {layers!r}")
    chosen = tuple(layers)
    unknown = [layer for layer in chosen if layer not in LAYERS]
    if unknown:
        raise ConfigurationError(f"unknown layer {unknown[0]!r}; valid layers: {', '.join(LAYERS)}")
    return chosen


def _clause_title(clause: str) -> str:
    try:
        table = getattr(importlib.import_module("trainspec.conformance.clauses"), "CLAUSES", {})
    except Exception:  # the report works without titles
        return ""
    title = getattr(table.get(clause), "title", "") if isinstance(table, Mapping) else ""
    return title if isinstance(title, str) else ""


def _expect(
    result: CheckResult, expected: Mapping[str, str], clause_failed_elsewhere: bool
) -> CheckResult:
    """Apply ``expected_failures`` as the kit's runner does: keyed by a clause, the
    declaration is satisfied when any check of the clause fails."""
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
        if key == result.clause and clause_failed_elsewhere:
            return result
        return dataclasses.replace(
            result,
            status="xpassed",
            message=f"expected failure {key} ({reason!r}) passed; remove it from expected_failures",
        )
    return result


def verify_distributed(
    target: object,
    *,
    world_size: int | None = None,
    timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    device: str = "cpu",
    backend: str | None = None,
    capabilities: Iterable[str] = (),
    expected_failures: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
    layers: Iterable[str] | None = None,
    select: Iterable[str] | None = None,
    world: World | None = None,
) -> Report:
    """Run the conformance kit for ``target`` on ``world_size`` ranks and return its Report.

    ``target`` is a :class:`TargetSpec`, a :class:`~trainspec.conformance.Target` whose
    factory is importable, or a ``(kind, "package.module:factory")`` pair; its kind must be
    one of :data:`DISTRIBUTED_KINDS`. ``capabilities`` are added to the target's;
    ``expected_failures`` and ``options`` override its entries (options must pickle).
    ``layers`` (default :data:`DEFAULT_LAYERS`) and ``select`` (check names or clauses) choose
    the checks; ``timeout_s`` bounds each check on the ranks.

    ``world``: an already running :class:`World` to use (and leave running); otherwise a
    world of ``world_size`` ranks (default 2) on ``device`` with ``backend`` is started for
    this call and closed afterwards. Raises :class:`~trainspec.ConfigurationError` for a bad
    configuration and :class:`~trainspec.LaunchError` when the ranks cannot start; every
    verdict about the implementation is in the report.
    """
    spec = TargetSpec.of(
        target,
        capabilities=capabilities,
        expected_failures=expected_failures,
        options=options,
    )
    if spec.kind not in DISTRIBUTED_KINDS:
        raise ConfigurationError(
            f"verify_distributed runs kinds {', '.join(DISTRIBUTED_KINDS)} on several ranks; "
            f"got {spec.kind!r} (use trainspec.conformance.verify for it)"
        )
    chosen = _layers(layers)
    if isinstance(select, str):
        raise ConfigurationError(f"select must be a collection of IDs, not the string {select!r}")
    selected = None if select is None else tuple(select)
    if world is not None and world_size is not None and world.world_size != world_size:
        raise ConfigurationError(
            f"verify_distributed: world_size={world_size} but the given world has "
            f"{world.world_size} ranks"
        )
    active = world if world is not None else World(world_size or 2, device=device, backend=backend)
    try:
        return _verify(active, spec, chosen, selected, timeout_s)
    finally:
        if world is None:
            active.close()


def _verify(
    world: World,
    spec: TargetSpec,
    layers: tuple[str, ...],
    select: tuple[str, ...] | None,
    timeout_s: float,
) -> Report:
    plan = world.plan(spec, layers, select, timeout_s)
    structure = [
        CheckResult.from_dict(item)
        for item in cast("list[Mapping[str, object]]", plan.get("structure", []))
    ]
    structure_failed = [r.check for r in structure if r.status in FAILING_STATUSES]
    raw: list[CheckResult] = []
    failed_by_layer: dict[str, set[str]] = {}
    for item in cast("list[Mapping[str, object]]", plan.get("checks", [])):
        name, clause, layer = str(item["name"]), str(item["clause"]), str(item["layer"])
        earlier = {
            c
            for other, clauses in failed_by_layer.items()
            if LAYERS.index(other) < LAYERS.index(layer)
            for c in clauses
        }
        if structure_failed:
            why = f"not run: structure failed ({', '.join(structure_failed)})"
            result = CheckResult(name, clause, layer, "blocked", why)
        elif clause in earlier:
            why = f"not run: {clause} failed in an earlier layer; fix that first"
            result = CheckResult(name, clause, layer, "blocked", why)
        else:
            result = world.run(name, spec, timeout_s).to_check_result()
            if result.status in _BLOCKING:
                failed_by_layer.setdefault(layer, set()).add(clause)
        raw.append(dataclasses.replace(result, clause_title=_clause_title(clause)))
    results = [
        *structure,
        *(_expect(r, spec.expected_failures, _other_failed(r, raw)) for r in raw),
    ]
    problems = [str(p) for p in cast("list[object]", plan.get("problems", []))]
    executed = sum(1 for r in raw if r.status not in ("skipped", "blocked"))
    if executed == 0 and not structure_failed:
        problems.append(
            f"no checks ran for {spec.display_name} on {world.world_size} ranks: "
            f"{len(raw)} selected, {sum(r.status == 'skipped' for r in raw)} skipped; a run "
            "that checks nothing cannot pass"
        )
    version = plan.get("version")
    return Report(
        targets=(
            TargetReport(
                kind=spec.kind,
                name=f"{plan.get('name', spec.display_name)} on {world.world_size} ranks "
                f"({world.backend})",
                results=tuple(results),
                version=version if isinstance(version, str) else None,
                capabilities=tuple(sorted(spec.capabilities)),
                expected_failures=dict(spec.expected_failures),
                problems=tuple(problems),
                duration_s=sum(r.duration_s for r in results),
            ),
        ),
        environment=Environment.current(),
    )


def _other_failed(result: CheckResult, raw: Iterable[CheckResult]) -> bool:
    return any(
        r.clause == result.clause and r.check != result.check and r.status in _BLOCKING for r in raw
    )
