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

The ranks only produce raw outcomes; blocking, expected failures, teardown accounting and the
zero-checks rule are :mod:`trainspec.conformance.verdict`'s, as for the in-process runner.

A hung or crashed check is a result like any other (``failed`` / ``error`` with every rank's
stack or stderr in its traceback); the world restarts and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast

from trainspec.conformance import verdict
from trainspec.conformance.core import LAYERS
from trainspec.conformance.distributed.results import launch_failure_report
from trainspec.conformance.distributed.spec import TargetSpec
from trainspec.conformance.distributed.world import DEFAULT_CHECK_TIMEOUT_S, World
from trainspec.conformance.kinds import KIND_TABLE, kind_spec
from trainspec.conformance.report import CheckResult, Environment, Report, TargetReport
from trainspec.conformance.verdict import RawOutcome
from trainspec.errors import ConfigurationError, LaunchError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from trainspec.conformance.distributed.results import DistributedResult

__all__ = ["DEFAULT_LAYERS", "DISTRIBUTED_KINDS", "verify_distributed"]

DISTRIBUTED_KINDS: Final = tuple(
    kind for kind, spec in KIND_TABLE.items() if spec.distributed_check_modules
)
"""The kinds whose checks mean something on several ranks: those the table of kinds gives
distributed check modules (``collective``, ``strategy``)."""
DEFAULT_LAYERS: Final = ("behaviour", "distributed", "end_to_end")
"""The layers run on the ranks (the structure layer always runs, on rank 0)."""


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


@dataclass(frozen=True)
class _Planned:
    """A check the ranks will run, as rank 0's plan lists it."""

    name: str
    clause: str
    layer: str


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
    configuration (a ``world_size`` above the machine's limit,
    :func:`~trainspec.conformance.distributed.world.max_world_size`, included). Ranks that
    cannot start, or a rank 0 that dies or hangs while loading the factory, fail the target
    in the report (a problem naming the rank and the cause). Every verdict about the
    implementation is in the report.
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
    except LaunchError as error:  # the ranks did not start, or rank 0 could not load it
        return launch_failure_report(
            spec.kind, spec.display_name, active.world_size, active.backend, error
        )
    finally:
        if world is None:
            active.close()


def _raw(result: DistributedResult, reported: set[str]) -> RawOutcome:
    status = result.status
    if status not in ("passed", "failed", "skipped", "error", "blocked"):  # combine() gives these
        status = "error"
    return RawOutcome(
        status,
        result.message,
        result.traceback,
        result.duration_s,
        teardown=result.teardown_problems_once(reported),
    )


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
    checks = [
        _Planned(str(item["name"]), str(item["clause"]), str(item["layer"]))
        for item in cast("list[Mapping[str, object]]", plan.get("checks", []))
    ]
    raw: dict[str, RawOutcome] = {}
    reported: set[str] = set()  # what was left behind, reported once per run
    for check in checks:  # in layer order, so blocking sees every earlier outcome
        if verdict.blocked_reason(check, checks, raw, structure) is None:
            raw[check.name] = _raw(world.run(check.name, spec, timeout_s), reported)
    problems = [str(p) for p in cast("list[object]", plan.get("problems", []))]
    name = str(plan.get("name", spec.display_name))
    judged = verdict.judge(
        checks,
        raw,
        structure,
        verdict.Declarations(
            name=name,
            expected_failures=dict(spec.expected_failures),
            lifecycle_clause=kind_spec(spec.kind).lifecycle_clause,
        ),
        problems,
        where=f" on {world.world_size} ranks",
    )
    version = plan.get("version")
    # The effective capabilities, as rank 0 saw them: given, declared on the implementation,
    # and inferred by the structure layer (a plan without them: those given).
    planned = plan.get("capabilities")
    capabilities = (
        tuple(sorted(str(c) for c in cast("list[object]", planned)))
        if isinstance(planned, list)
        else tuple(sorted(spec.capabilities))
    )
    return Report(
        targets=(
            TargetReport(
                kind=spec.kind,
                name=f"{name} on {world.world_size} ranks ({world.backend})",
                results=judged.results,
                version=version if isinstance(version, str) else None,
                capabilities=capabilities,
                expected_failures=dict(spec.expected_failures),
                problems=judged.problems,
                duration_s=sum(r.duration_s for r in judged.results),
            ),
        ),
        environment=Environment.current(),
    )
