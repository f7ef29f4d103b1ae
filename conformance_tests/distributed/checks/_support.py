"""Plumbing shared by the distributed checks: registration, the rank context, set-up
and clean-up, verdicts shared between ranks, synchronised hypothesis runs."""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, cast

import torch
from hypothesis import HealthCheck, Phase, given, settings

from trainspec.conformance._helpers import describe_exception, failure
from trainspec.conformance.core import Check, CheckFn, CheckSkipped, Kind, Layer, Target, check
from trainspec.conformance.distributed.context import RANK_CONTEXT_OPTION, RankContext
from trainspec.errors import CollectiveTimeoutError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from hypothesis.strategies import SearchStrategy

    from trainspec.collective import Collective
    from trainspec.strategy import Strategy
    from trainspec.types import ReduceOp


__all__ = [
    "DISTRIBUTED_CHECKS",
    "NEEDS_HARNESS",
    "SHORT_TIMEOUT",
    "TIMEOUT_SLACK_S",
    "Communicates",
    "Echo",
    "agree",
    "barrier_problem",
    "device_option",
    "distributed_check",
    "float_option",
    "guarded",
    "max_examples",
    "rank_context",
    "run_examples",
    "set_up_collective",
    "set_up_strategy",
    "show",
    "teardown_quietly",
    "timeout_problem",
]

_T = TypeVar("_T")

DISTRIBUTED_CHECKS: Final[list[Check]] = []
"""Every check defined here, in definition order (they are also registered with the kit)."""

NEEDS_HARNESS: Final = (
    "needs a world of at least 2 ranks run by the distributed harness "
    "(trainspec.conformance.distributed.verify_distributed or World.run)"
)

# Only the timeout checks (COLL-2, and STRAT-12's barrier) pass ``timeout=``: every other
# check calls the operations without it, so a plugin whose per-call timeouts are broken fails
# the timeout clause alone. A hang elsewhere is the harness's watchdog's to catch.
SHORT_TIMEOUT: Final = timedelta(seconds=1)
TIMEOUT_SLACK_S: Final = 10.0
_BARRIER_DELAY_S: Final = 0.5


def distributed_check(
    clause: str, kind: Kind, *, layer: Layer = "distributed", requires: Sequence[str] = ()
) -> Callable[[CheckFn], CheckFn]:
    """:func:`~trainspec.conformance.check`, also listing the check in DISTRIBUTED_CHECKS."""

    def register(func: CheckFn) -> CheckFn:
        check(clause, kind, layer=layer, requires=requires)(func)
        doc = (func.__doc__ or "").strip().splitlines()
        DISTRIBUTED_CHECKS.append(
            Check(
                clause=clause,
                name=func.__name__,
                kind=kind,
                layer=layer,
                requires=frozenset(requires),
                func=func,
                doc=doc[0] if doc else "",
            )
        )
        return func

    return register


# --------------------------------------------------------------------------- shared helpers


def rank_context(target: Target[object]) -> RankContext:
    """The rank's :class:`RankContext`; raises :class:`CheckSkipped` outside the harness or
    on a world of one rank."""
    context = target.options.get(RANK_CONTEXT_OPTION)
    if not isinstance(context, RankContext) or context.world_size < 2:
        raise CheckSkipped(NEEDS_HARNESS)
    return context


def device_option(target: Target[object]) -> torch.device:
    value = target.options.get("device", "cpu")
    if isinstance(value, (str, torch.device)):
        return torch.device(value)
    raise TypeError(f"conformance option 'device' must be a str or torch.device, got {value!r}")


def float_option(target: Target[object], name: str, default: float) -> float:
    value = target.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"conformance option {name!r} must be a number, got {value!r}")
    return float(value)


def max_examples(target: Target[object]) -> int:
    value = target.options.get("distributed_max_examples", 10)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(
            f"conformance option 'distributed_max_examples' must be an int >= 1, got {value!r}"
        )
    return value


def agree(
    target: Target[object],
    context: RankContext,
    clause: str,
    problem: str | None,
    *,
    expected: str,
    hint: str = "",
) -> None:
    """Share this rank's ``problem`` (None: none); if any rank has one, every rank raises the
    same :class:`CheckFailure` naming the ranks and what they saw."""
    problems = context.exchange(problem)
    by_text: dict[str, list[int]] = {}
    for rank, text in enumerate(problems):
        if text is not None:
            by_text.setdefault(text, []).append(rank)
    if not by_text:
        return
    echoes = {text for text in problems if isinstance(text, Echo)}
    parts = []
    # The primary ranks' problems first: the headline names the cause, not its echo.
    for text, ranks in sorted(by_text.items(), key=lambda item: item[0] in echoes):
        if len(ranks) == len(problems):
            where = "every rank"
        else:
            where = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
        parts.append(f"on {where}: {text}")
    raise failure(target, clause, expected=expected, actual="; ".join(parts), hint=hint)


def run_examples(strategy: SearchStrategy[_T], test: Callable[[_T], None], limit: int) -> None:
    """Run ``test`` on ``limit`` examples, the same ones on every rank: derandomized, no
    database, no time-dependent health checks and no shrinking (a rank that shrank alone
    would run collectives the others never join)."""

    @settings(
        max_examples=limit,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy)
    def run(example: _T) -> None:
        test(example)

    run()


def teardown_quietly(component: object) -> None:
    teardown = getattr(component, "teardown", None)
    if callable(teardown):
        try:
            teardown()
        except Exception:  # cleanup must not hide the check's outcome
            pass


@contextmanager
def set_up_collective(target: Target[Collective]) -> Iterator[tuple[Collective, RankContext]]:
    context = rank_context(cast("Target[object]", target))
    collective = target.make()
    collective.setup(context.environment(), device_option(cast("Target[object]", target)))
    try:
        yield collective, context
    finally:
        teardown_quietly(collective)


@contextmanager
def set_up_strategy(target: Target[Strategy]) -> Iterator[tuple[Strategy, RankContext]]:
    context = rank_context(cast("Target[object]", target))
    strategy = target.make()
    strategy.setup_environment()
    try:
        yield strategy, context
    finally:
        teardown_quietly(strategy)


def show(value: object) -> str:
    if isinstance(value, torch.Tensor):
        shown = value.detach().to("cpu").tolist() if value.numel() <= 8 else "..."
        return f"tensor({shown}, dtype={value.dtype}, shape={tuple(value.shape)})"
    if isinstance(value, (list, tuple)):
        items = [show(item) for item in value[:6]]
        return "[" + ", ".join(items) + (", ...]" if len(value) > 6 else "]")
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


class Echo(str):
    """A problem that is likely the echo of another rank's failure (a collective that timed
    out or lost its peer): :func:`agree` lists it after the primary ranks' problems."""

    __slots__ = ()


def guarded(body: Callable[[], str | None]) -> str | None:
    """``body()``'s problem, or the exception it raised as one (an :class:`Echo` when the
    exception is a secondary one, as the reference launchers judge it)."""
    from trainspec.reference.launchers import is_secondary

    try:
        return body()
    except Exception as error:
        text = f"raised {describe_exception(error)}"
        return Echo(text) if is_secondary(error) else text


class Communicates(Protocol):
    """The collective operations a Collective and a Strategy share."""

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor: ...

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]: ...

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor: ...

    def broadcast_object(
        self, obj: _T, src: int = 0, *, timeout: timedelta | None = None
    ) -> _T: ...

    def barrier(self, *, timeout: timedelta | None = None) -> None: ...


def barrier_problem(comm: Communicates, context: RankContext) -> str | None:
    """The last rank enters late; no rank may leave the barrier before it entered."""
    late = context.world_size - 1
    entered = None
    if context.rank == late:
        time.sleep(_BARRIER_DELAY_S)
        entered = time.time()
    comm.barrier()
    left = time.time()
    times = context.exchange((entered, left))
    late_entry = times[late][0]
    assert late_entry is not None
    early = [rank for rank, (_, out) in enumerate(times) if out < late_entry]
    if early:
        return (
            f"ranks {early} left barrier() {late_entry - min(times[r][1] for r in early):.2f} s "
            f"before rank {late} entered it"
        )
    return None


def timeout_problem(call: Callable[[], object], context: RankContext, what: str) -> str | None:
    """The last rank stays away from ``call``; the others must raise CollectiveTimeoutError
    within the timeout plus a slack. Every rank meets again through the harness."""
    absent = context.world_size - 1
    problem: str | None = None
    if context.rank != absent:
        started = time.monotonic()
        try:
            call()
            problem = f"{what} returned although rank {absent} never called it"
        except CollectiveTimeoutError:
            waited = time.monotonic() - started
            limit = SHORT_TIMEOUT.total_seconds() + TIMEOUT_SLACK_S
            if waited > limit:
                problem = f"{what} raised CollectiveTimeoutError only after {waited:.1f} s"
        except Exception as error:
            problem = f"{what} raised {describe_exception(error)}, not CollectiveTimeoutError"
    context.barrier()  # the absent rank waits here until the others have given up
    return problem
