"""Distributed checks of sharded strategies and distributed checkpoint IO (SHARD-1, LAYOUT-1,
STRAT-14, STRAT-15, DCKPT-1 ... DCKPT-7).

- SHARD-1: a module built in ``sharded_module_context`` and one built outside, loaded with the
  same state and trained the same steps, end equal; a dispatch-mode spy sums the bytes of every
  tensor storage allocated on the rank while the module is built and set up, which must stay
  below the module's total parameter bytes (so no rank ever held the whole module).
- LAYOUT-1: the declared layout is valid, constant and the same on every rank; under
  ``"sharded"`` the checkpoint IO is a DistributedCheckpointIO.
- STRAT-14/15 by layout: under the full layout global rank zero's module and optimizer state
  hold complete tensors (never this rank's shard); under the sharded layout every value is
  complete or a sharded tensor whose ``full_tensor()`` is the complete value.
- DCKPT-*: the strategy's DistributedCheckpointIO on the ranks (capability
  ``sharded_checkpoint``): parts of ``DTensor`` shards load back complete on every rank; a rank
  that enters a save late first sees the previous checkpoint; a save whose ranks are killed
  (in a world of child processes, :mod:`._sharded_kill`) leaves the previous or the new
  checkpoint; damaged files raise the checkpoint errors; removal; resharding 2 -> 1 and
  1 -> 2; a failure on one rank reaches every rank; teardown unbinds.
"""

from __future__ import annotations

import os
import random
import time
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Final, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trainspec.capabilities import ShardedModuleContext
from trainspec.conformance._helpers import describe_exception, failure, importable_path
from trainspec.conformance.core import CheckSkipped
from trainspec.conformance.distributed.checks._sharded_kill import (
    KillWorld,
    KillWorldError,
    kill_part,
    kill_whole,
)
from trainspec.conformance.distributed.checks._support import (
    agree,
    distributed_check,
    guarded,
    set_up_strategy,
    show,
    teardown_quietly,
)
from trainspec.conformance.distributed.checks._training import (
    build_model,
    compare_states,
    complete,
    make_optimizer,
    rank_batch,
    set_up_training,
    state_of,
    train_step,
)
from trainspec.distributed_checkpoint_io import (
    CHECKPOINT_LAYOUTS,
    CheckpointLayoutControl,
    DistributedCheckpointIO,
)
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CollectiveError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trainspec.conformance.core import Target
    from trainspec.conformance.distributed.context import RankContext
    from trainspec.strategy import Strategy

__all__ = [
    "AllocationSpy",
    "check_dckpt_damaged_checkpoints_raise_checkpoint_errors",
    "check_dckpt_failure_on_one_rank_reaches_every_rank",
    "check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint",
    "check_dckpt_late_rank_sees_the_previous_checkpoint",
    "check_dckpt_parts_load_back_complete_on_every_rank",
    "check_dckpt_remove_is_collective_and_idempotent",
    "check_dckpt_reshards_between_two_ranks_and_one",
    "check_dckpt_teardown_unbinds_and_is_idempotent",
    "check_layout_is_declared_constant_and_agreed",
    "check_sharded_module_context_trains_alike_and_never_holds_the_whole_module",
    "check_state_dicts_hold_complete_values_as_the_layout_requires",
    "check_strategy_optimizer_built_before_setup_module_trains_the_set_up_module",
    "largest_parameter_allocation",
]

_LATE_S: Final = 0.5
_SEED: Final = 31


# --------------------------------------------------------------------------- allocation spy


class AllocationSpy(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sums the bytes of every tensor storage that an operation allocates (not on the meta
    device) while active; in-place operations and views, whose result shares an input's
    storage, add nothing. Sharded tensors (``DTensor``) count their local shard. An upper
    bound of what the rank held at any moment."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bytes = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: Any = (),
        kwargs: Any = None,
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        inputs = {_storage_key(t) for t in tree_leaves((args, kwargs)) if _is_tensor(t)}
        for tensor in tree_leaves(result):
            if _is_tensor(tensor):
                key = _storage_key(tensor)
                if key is not None and key not in inputs:
                    self.bytes += key[1]
        return result


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _storage_key(tensor: torch.Tensor) -> tuple[int, int] | None:
    local = getattr(tensor, "_local_tensor", tensor)
    if not isinstance(local, torch.Tensor) or local.is_meta:
        return None
    try:
        storage = local.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage.data_ptr(), storage.nbytes()


@contextmanager
def largest_parameter_allocation() -> Iterator[AllocationSpy]:
    """An :class:`AllocationSpy` active for the block; read ``.bytes`` afterwards."""
    spy = AllocationSpy()
    with spy:
        yield spy


def _layout(strategy: Strategy) -> str:
    if isinstance(strategy, CheckpointLayoutControl):
        return str(strategy.checkpoint_layout)
    return "full"


# --------------------------------------------------------------------------- SHARD-1


@distributed_check("SHARD-1", "strategy", requires=("sharded_module",))
def check_sharded_module_context_trains_alike_and_never_holds_the_whole_module(
    target: Target[Strategy],
) -> None:
    """A module built in the sharded context must train like one built outside, and building
    and setting it up must allocate less than the whole module on every rank."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        if not isinstance(strategy, ShardedModuleContext):
            raise failure(
                plain,
                "SHARD-1",
                expected="implement trainspec.ShardedModuleContext (capability sharded_module)",
                actual=f"{type(strategy).__qualname__} has no sharded_module_context",
            )
        sharding = strategy
        world, rank = context.world_size, context.rank

        def body() -> str | None:
            total = sum(p.numel() * p.element_size() for p in build_model(_SEED).parameters())
            with largest_parameter_allocation() as spy:
                with sharding.sharded_module_context():
                    inside = build_model(_SEED)
                inside = strategy.setup_module(inside)
            with strategy.module_init_context():
                outside_model = build_model(_SEED)
            outside = strategy.setup_module(outside_model)
            start = state_of(strategy, outside)
            strategy.load_module_state_dict(inside, start)
            optimizers = [
                strategy.setup_optimizer(make_optimizer(m.parameters())) for m in (inside, outside)
            ]
            for step in range(2):
                for module, optimizer in zip((inside, outside), optimizers, strict=True):
                    train_step(strategy, module, optimizer, rank_batch(step, rank, world))
            a, b = state_of(strategy, inside), state_of(strategy, outside)
            worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in b)
            if set(a) != set(b) or worst > 1e-5:
                return (
                    f"the module built in sharded_module_context trained to different weights "
                    f"(largest difference {worst:.3g})"
                )
            if spy.bytes >= total:
                return (
                    f"building and setting up the module allocated {spy.bytes} bytes on this "
                    f"rank; the whole module's parameters are {total} bytes"
                )
            return None

        agree(
            plain,
            context,
            "SHARD-1",
            guarded(body),
            expected="train a module built in sharded_module_context like one built outside, "
            "and never allocate the whole module's parameters on one rank while building and "
            "setting it up",
            hint="Create parameters on the meta device and materialise only this rank's shards.",
        )


# --------------------------------------------------------------------------- STRAT-5


@distributed_check("STRAT-5", "strategy")
def check_strategy_optimizer_built_before_setup_module_trains_the_set_up_module(
    target: Target[Strategy],
) -> None:
    """An optimizer built before setup_module must, once set up, train the set-up module like
    one built over the set-up module's parameters."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank

        def body() -> str | None:
            with strategy.module_init_context():
                model = build_model(_SEED)
            early = make_optimizer(model.parameters())
            module = strategy.setup_module(model)
            early = strategy.setup_optimizer(early)
            before = state_of(strategy, module)
            train_step(strategy, module, early, rank_batch(0, rank, world))
            got = state_of(strategy, module)
            if all(torch.equal(before[k], got[k]) for k in before):
                return (
                    "one step with an optimizer built before setup_module left the set-up "
                    "module unchanged (the optimizer still holds the replaced parameters)"
                )
            module, late = set_up_training(strategy, _SEED)
            train_step(strategy, module, late, rank_batch(0, rank, world))
            want = state_of(strategy, module)
            problem = compare_states(got, want, 1e-5, 1e-6)
            return (
                None if problem is None else f"trained unlike an optimizer built after: {problem}"
            )

        agree(
            plain,
            context,
            "STRAT-5",
            guarded(body),
            expected="accept an optimizer built before setup_module and make it train the set-up "
            "module",
            hint="When setup_module replaces parameters (sharding), rebind the optimizer's "
            "parameter groups in setup_optimizer.",
        )


# --------------------------------------------------------------------------- LAYOUT-1


@distributed_check("LAYOUT-1", "strategy", requires=("checkpoint_layout",))
def check_layout_is_declared_constant_and_agreed(target: Target[Strategy]) -> None:
    """checkpoint_layout must be 'full' or 'sharded', constant, the same on every rank; under
    'sharded' the checkpoint IO must be a DistributedCheckpointIO."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):

        def body() -> str | None:
            if not isinstance(strategy, CheckpointLayoutControl):
                return f"{type(strategy).__qualname__} does not implement CheckpointLayoutControl"
            first, second = strategy.checkpoint_layout, strategy.checkpoint_layout
            if first not in CHECKPOINT_LAYOUTS or first != second:
                return f"checkpoint_layout read {first!r} then {second!r}"
            layouts = context.exchange(first)
            if len(set(layouts)) != 1:
                return f"the ranks declare different layouts {layouts}"
            if first == "sharded" and not isinstance(
                strategy.checkpoint_io, DistributedCheckpointIO
            ):
                return (
                    "the layout is 'sharded' but checkpoint_io is a "
                    f"{type(strategy.checkpoint_io).__qualname__}, not a DistributedCheckpointIO"
                )
            return None

        agree(
            plain,
            context,
            "LAYOUT-1",
            guarded(body),
            expected="declare checkpoint_layout 'full' or 'sharded', constant and the same on "
            "every rank, with a DistributedCheckpointIO under 'sharded'",
        )


# --------------------------------------------------------------------------- STRAT-14/15


def _value_problem(name: str, value: object, want: torch.Tensor, layout: str) -> str | None:
    if not isinstance(value, torch.Tensor):
        return f"{name} is a {type(value).__name__}, not a tensor"
    sharded = hasattr(value, "full_tensor")
    if layout == "full" and sharded:
        return f"{name} is a sharded tensor; the full layout needs the complete tensor"
    whole = complete(value).detach().to("cpu", torch.float64)
    if tuple(whole.shape) != tuple(want.shape):
        return (
            f"{name} has shape {tuple(whole.shape)}; the complete value has shape "
            f"{tuple(want.shape)} (is it only this rank's shard?)"
        )
    if not torch.allclose(whole, want.to(torch.float64), rtol=1e-5, atol=1e-6):
        return f"{name} holds {show(whole)}; the complete value is {show(want)}"
    return None


@distributed_check("STRAT-14", "strategy")
def check_state_dicts_hold_complete_values_as_the_layout_requires(
    target: Target[Strategy],
) -> None:
    """Under the full layout rank zero's module and optimizer state must be complete tensors;
    under the sharded layout complete or sharded tensors forming the complete value."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank
        layout = _layout(strategy)

        def body() -> str | None:
            if layout == "full" and strategy.global_rank != 0:
                # Only rank zero's values are written; the others' are unspecified, but the
                # calls are collective for some strategies: make them on every rank.
                module, optimizer = _one_step(strategy, rank, world)
                strategy.module_state_dict(module)
                strategy.optimizer_state_dict(optimizer)
                return None
            module, optimizer = _one_step(strategy, rank, world)
            reference = build_model(_SEED)
            reference_optimizer = make_optimizer(reference.parameters())
            from trainspec.conformance.distributed.checks._training import mse_loss

            batches = [rank_batch(0, r, world) for r in range(world)]
            total = sum((mse_loss(reference(x), y) for x, y in batches), torch.zeros(()))
            torch.autograd.backward(total / world)
            reference_optimizer.step()
            want = reference.state_dict()
            got = strategy.module_state_dict(module)
            # Collective for some strategies: called before any early return, as on the others.
            saved = strategy.optimizer_state_dict(optimizer)
            if sorted(got) != sorted(want):
                return f"module_state_dict keys {sorted(got)}; the module's are {sorted(want)}"
            for key in want:
                problem = _value_problem(
                    f"module_state_dict()[{key!r}]", got[key], want[key], layout
                )
                if problem is not None:
                    return problem
            want_state = reference_optimizer.state_dict()["state"]
            state = saved.get("state") if isinstance(saved, dict) else None
            if not isinstance(state, dict) or sorted(state) != sorted(want_state):
                return (
                    "optimizer_state_dict()['state'] is not keyed by the parameters' integer "
                    f"positions {sorted(want_state)}: got {show(state)}"
                )
            for index, entry in want_state.items():
                buffer = entry["momentum_buffer"]
                problem = _value_problem(
                    f"optimizer_state_dict()['state'][{index}]['momentum_buffer']",
                    state[index].get("momentum_buffer"),
                    buffer,
                    layout,
                )
                if problem is not None:
                    return problem
            return None

        def layout_body() -> str | None:
            problem = body()
            return None if problem is None else f"({layout} layout) {problem}"

        agree(
            plain,
            context,
            "STRAT-14",
            guarded(layout_body),
            expected="return state dicts whose values are the complete tensors (full layout: "
            "plain tensors on global rank zero; sharded layout: complete or sharded tensors "
            "forming the complete value)",
            hint="Under the full layout gather every shard (for FSDP2: "
            "get_model_state_dict(..., StateDictOptions(full_state_dict=True))).",
        )


def _one_step(
    strategy: Strategy, rank: int, world: int
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    with strategy.module_init_context():
        model = build_model(_SEED)
    module = strategy.setup_module(model)
    optimizer = strategy.setup_optimizer(make_optimizer(module.parameters()))
    from trainspec.conformance.distributed.checks._training import backward_on

    backward_on(strategy, module, rank_batch(0, rank, world))
    strategy.optimizer_step(optimizer)
    return module, optimizer


# --------------------------------------------------------------------------- DCKPT


def _io(target: Target[Strategy], strategy: Strategy) -> DistributedCheckpointIO:
    io = strategy.checkpoint_io
    if not isinstance(io, DistributedCheckpointIO):
        raise failure(
            cast("Target[object]", target),
            "DCKPT-1",
            expected="a DistributedCheckpointIO as checkpoint_io (capability sharded_checkpoint)",
            actual=f"checkpoint_io is a {type(io).__qualname__}",
        )
    return io


_SHAPES: Final = ((5, 3), (4,), (3, 2, 2), (1, 4))
_DTYPES: Final = (torch.float32, torch.bfloat16, torch.int64, torch.float64)


def _complete_values(step: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(500 + step)
    values = {}
    for index, (shape, dtype) in enumerate(zip(_SHAPES, _DTYPES, strict=True)):
        value = torch.randn(shape, generator=generator) * 10
        values[f"s{index}"] = value.to(dtype)
    return values


def _part(strategy: Strategy, step: int) -> tuple[dict[str, object], dict[str, object]]:
    """This rank's part (sharded tensors along dim 0) and the complete checkpoint."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    values = _complete_values(step)
    mesh = init_device_mesh(strategy.root_device.type, (strategy.world_size,))
    sharded = {
        key: distribute_tensor(value.to(strategy.root_device), mesh, [Shard(0)])
        for key, value in values.items()
    }
    replicated = torch.arange(6.0).reshape(2, 3) + step
    extra = {"step": step, "name": "part", "ratio": 0.5, "flags": [True, None, (1, "x")]}
    part: dict[str, object] = {"sharded": sharded, "replicated": replicated, "extra": extra}
    whole: dict[str, object] = {"sharded": values, "replicated": replicated, "extra": extra}
    return part, whole


def _difference(got: object, want: object, where: str = "checkpoint") -> str | None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or hasattr(got, "full_tensor"):
            return f"{where} is {show(got)}, expected a complete tensor {show(want)}"
        got_cpu = got.detach().to("cpu")
        if got_cpu.dtype != want.dtype or tuple(got_cpu.shape) != tuple(want.shape):
            return (
                f"{where} has dtype {got_cpu.dtype} and shape {tuple(got_cpu.shape)}; expected "
                f"{want.dtype} and {tuple(want.shape)}"
            )
        if not torch.equal(got_cpu, want.to("cpu")):
            return f"{where} holds {show(got_cpu)}, expected {show(want)}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(map(str, got)) != sorted(map(str, want)):
            return f"{where} is {show(got)}, expected the keys {sorted(map(str, want))}"
        for key in want:
            problem = _difference(got[key], want[key], f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if isinstance(want, (list, tuple)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{where} is {show(got)}, expected {show(want)}"
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            problem = _difference(a, b, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if type(got) is not type(want) or got != want:
        return f"{where} is {show(got)}, expected {show(want)}"
    return None


def _dckpt(
    target: Target[Strategy],
    clause: str,
    expected: str,
    body: Any,
    hint: str = "",
) -> None:
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        io = _io(target, strategy)
        agree(
            plain,
            context,
            clause,
            guarded(lambda: body(strategy, io, context)),
            expected=expected,
            hint=hint,
        )


@distributed_check("DCKPT-1", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_parts_load_back_complete_on_every_rank(target: Target[Strategy]) -> None:
    """Parts of sharded tensors must load back as the complete checkpoint on every rank."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        path = os.path.join(context.shared_dir, "parts")
        part, whole = _part(strategy, 0)
        local = cast("dict[str, Any]", part["sharded"])["s0"].to_local()
        if tuple(local.shape) == _SHAPES[0]:
            return "kit error: the sharded input is not sharded"
        io.save_checkpoint(part, path)
        loaded = io.load_checkpoint(path)
        return _difference(loaded, whole)

    _dckpt(
        target,
        "DCKPT-1",
        "load the complete checkpoint (sharded tensors as the complete tensors their shards "
        "form) on every rank after every rank saved its part",
        body,
    )


@distributed_check("DCKPT-2", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_late_rank_sees_the_previous_checkpoint(target: Target[Strategy]) -> None:
    """A rank that enters a save late must first still see the previous complete checkpoint."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        path = os.path.join(context.shared_dir, "atomic")
        old_part, old = _part(strategy, 1)
        io.save_checkpoint(old_part, path)
        new_part, new = _part(strategy, 2)
        late = context.world_size - 1
        seen: str | None = None
        if context.rank == late:
            time.sleep(_LATE_S)  # the other ranks are inside save_checkpoint by now
            try:
                problem = _difference(io.load_checkpoint(path), old)
            except Exception as error:
                problem = f"raised {describe_exception(error)}"
            if problem is not None:
                seen = (
                    "while this rank had not yet entered the save, loading the path did not "
                    f"give the previous checkpoint: {problem}"
                )
        io.save_checkpoint(new_part, path)
        after = _difference(io.load_checkpoint(path), new)
        return seen or (None if after is None else f"after the save: {after}")

    _dckpt(
        target,
        "DCKPT-2",
        "commit a sharded save only after every rank wrote its part, so that until then "
        "the previous checkpoint loads",
        body,
        hint="Write into a staging location, agree that every rank wrote, then commit.",
    )


# DCKPT-2 decided by killing ranks: in a world of child processes (the harness's own ranks must
# survive), see trainspec.conformance.distributed.checks._sharded_kill.

_KILL_TRIALS: Final = 3
_KILL_SEED: Final = 11
_KILL_SAVE_CAP_S: Final = 0.4
"""The longest save the random kill delays (up to 2.5 saves) are drawn for."""


def _any_problem(context: RankContext, problem: str | None) -> bool:
    """Whether any rank has a problem (every rank learns it, so all stop at the same point)."""
    return any(text is not None for text in context.exchange(problem))


def _killed_load_problem(
    io: DistributedCheckpointIO, path: str, allowed: set[int]
) -> tuple[str | None, int]:
    """What is wrong with the checkpoint at ``path`` (None: it is save ``step`` whole, a step in
    ``allowed``), and the step it loaded (-1 if none)."""
    try:
        loaded = io.load_checkpoint(path)
    except Exception as error:
        return f"load_checkpoint raised {describe_exception(error)}", -1
    step = loaded.get("step")
    if not isinstance(step, int) or step not in allowed:
        return (
            f"it loaded the checkpoint of step {show(step)}; the previous save was step "
            f"{min(allowed)} and the one in progress step {max(allowed)}"
        ), -1
    problem = _difference(loaded, kill_whole(step))
    if problem is not None:
        problem = (
            f"it loaded a checkpoint that is not save {step} whole (a mix of saves, or a "
            f"rank's part missing): {problem}"
        )
    return problem, step


def _tree(path: str) -> tuple[int, int]:
    directories = files = 0
    for _, names, found in os.walk(path):
        directories += len(names)
        files += len(found)
    return directories, files


def _killed_saves(
    strategy: Strategy,
    io: DistributedCheckpointIO,
    context: RankContext,
    world: KillWorld | None,
    skip: list[str],
) -> str | None:
    from torch.distributed.device_mesh import init_device_mesh

    device = strategy.root_device
    mesh = init_device_mesh(device.type, (context.world_size,))
    path = os.path.join(context.shared_dir, "killed")
    control = os.path.join(context.shared_dir, "control")
    io.save_checkpoint(kill_part(device, mesh, 0), path)
    io.save_checkpoint(kill_part(device, mesh, 1), control)
    started = time.perf_counter()  # a warm save: the first use of DTensor may take seconds
    io.save_checkpoint(kill_part(device, mesh, 2), control)
    save_s = min(time.perf_counter() - started, _KILL_SAVE_CAP_S)
    problem, _ = _killed_load_problem(io, path, {0})
    problem = None if problem is None else f"before any kill, {problem}"
    if _any_problem(context, problem):
        return problem
    rng = random.Random(_KILL_SEED)
    current = 0
    ranks = context.world_size
    for trial in range(_KILL_TRIALS):
        victim = ranks - 1 if trial % 2 == 0 else 0
        base = 1000 * (trial + 1)
        payload: tuple[str, object] | None = None
        if world is not None:  # rank 0
            change = trial == 0
            try:
                outcome = world.trial(
                    path,
                    base=base,
                    victim=victim,
                    delay_s=None if change else rng.uniform(0.0, 2.5 * save_s),
                    timer_s=rng.uniform(5e-5, 5e-4) if change else None,
                    timeout_s=max(10.0, 50 * save_s),
                )
            except KillWorldError as error:
                payload = ("skip", f"the kill check's child processes failed: {error}")
            except Exception as error:  # the other ranks wait for this rank's word: send one
                payload = (
                    "skip",
                    f"the kill check's child processes failed: {describe_exception(error)}",
                )
            else:
                if not outcome.started:
                    payload = (
                        "skip",
                        f"the factory did not set up a strategy in a fresh world of {ranks} "
                        f"processes ({outcome.error}); DCKPT-2's kill check needs one",
                    )
                elif outcome.error:
                    payload = (
                        "problem",
                        f"in a fresh world of {ranks} processes, a save failed before any rank "
                        f"was killed: {outcome.error}",
                    )
                else:
                    most = max(outcome.saves)
                    allowed = [current if most == 0 else base + most - 1, base + most]
                    payload = ("killed", (allowed, f"rank {victim} {outcome.when}"))
        what, detail = cast("tuple[str, Any]", context.exchange(payload)[0])
        if what == "skip":
            skip.append(str(detail))
            return None
        if what == "problem":
            return str(detail)
        allowed, when = detail
        problem, current = _killed_load_problem(io, path, set(allowed))
        if problem is not None:
            problem = f"after a SIGKILL of {when} of a save on {ranks} ranks, {problem}"
        if _any_problem(context, problem):
            return problem
    io.save_checkpoint(kill_part(device, mesh, 9), path)
    problem, _ = _killed_load_problem(io, path, {9})
    if problem is None and context.rank == 0 and _tree(path) != _tree(control):
        problem = (
            f"after the kills, a successful save left {_tree(path)} (directories, files) under "
            f"the path, where two uninterrupted saves leave {_tree(control)}: staging data of "
            "the killed saves was left behind"
        )
    elif problem is not None:
        problem = f"a save after the kills: {problem}"
    return problem


@distributed_check("DCKPT-2", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint(
    target: Target[Strategy],
) -> None:
    """A sharded save killed on any rank must leave the previous or the new checkpoint.

    Rank 0 starts a world of as many fresh processes, each building a strategy with the
    target's factory (imported by its module and name) on a free port and saving recognisable
    sharded checkpoints over one path in a loop; a rank of it is killed with SIGKILL the moment
    the path changes or at a random point, the others a moment later. Every rank of the
    harness then loads the path: the previous save or the one in progress, whole. After the
    trials a save must leave what uninterrupted saves leave. Skipped (counted) when the factory
    is not importable or builds no strategy in a fresh process.
    """
    plain = cast("Target[object]", target)
    if not hasattr(os, "fork"):
        raise CheckSkipped("this platform cannot fork the ranks to kill (POSIX only)")
    located = importable_path(target.factory)
    if located is None:
        factory = getattr(target.factory, "__wrapped__", target.factory)
        raise CheckSkipped(
            f"the factory {factory!r} is not importable by its module and name (a "
            "lambda, local function or partial): child processes cannot build the strategy to "
            "kill"
        )
    with set_up_strategy(target) as (strategy, context):
        io = _io(target, strategy)
        skip: list[str] = []
        with ExitStack() as stack:
            world: KillWorld | None = None
            if context.rank == 0:  # its server imports torch while the ranks save
                world = stack.enter_context(
                    KillWorld(
                        *located, world_size=context.world_size, main_address=context.main_address
                    )
                )
            problem = guarded(lambda: _killed_saves(strategy, io, context, world, skip))
        if skip:
            raise CheckSkipped(skip[0])
        agree(
            plain,
            context,
            "DCKPT-2",
            problem,
            expected="leave the previous or the new complete checkpoint when any rank of a "
            "sharded save is killed, and nothing of the killed saves after the next save",
            hint="Write every rank's part into a staging location, agree that every rank "
            "wrote, then commit with one atomic step (a rename or a pointer replaced with "
            "os.replace); never write into the committed checkpoint.",
        )


def _damage_outcomes(
    io: DistributedCheckpointIO, path: str, whole: object, context: Any
) -> str | None:
    files = sorted(os.path.join(root, name) for root, _, names in os.walk(path) for name in names)
    if not files:
        return f"kit error: no file under {path} after a save (is it a local directory?)"
    for file in files:
        with open(file, "rb") as handle:
            original = handle.read()
        for damage in ("delete", "truncate", "garbage"):
            context.barrier()
            if context.rank == 0:
                if damage == "delete":
                    os.unlink(file)
                else:
                    data = (
                        original[: len(original) // 2]
                        if damage == "truncate"
                        else bytes((byte + 101) % 256 for byte in original)
                    )
                    with open(file, "wb") as handle:
                        handle.write(data)
            context.barrier()
            name = os.path.relpath(file, path)
            try:
                loaded = io.load_checkpoint(path)
            except CheckpointCorruptedError as error:
                if path not in str(error) and os.path.basename(path) not in str(error):
                    return (
                        f"the CheckpointCorruptedError for {name} ({damage}) does not name {path}"
                    )
            except Exception as error:
                return (
                    f"with {name} {damage}d, load_checkpoint raised {describe_exception(error)} "
                    "instead of CheckpointCorruptedError"
                )
            else:
                problem = _difference(loaded, whole)
                if problem is not None:
                    return (
                        f"with {name} {damage}d, load_checkpoint returned a wrong checkpoint: "
                        f"{problem}"
                    )
            context.barrier()
            if context.rank == 0:
                with open(file, "wb") as handle:
                    handle.write(original)
    context.barrier()
    return None


@distributed_check("DCKPT-3", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_damaged_checkpoints_raise_checkpoint_errors(target: Target[Strategy]) -> None:
    """Missing checkpoints raise CheckpointNotFoundError; a deleted, truncated or garbled file
    raises CheckpointCorruptedError naming the path."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        missing = os.path.join(context.shared_dir, "never-saved")
        try:
            io.load_checkpoint(missing)
            return "loading a path where nothing was saved returned a checkpoint"
        except CheckpointNotFoundError:
            pass
        path = os.path.join(context.shared_dir, "damaged")
        part, whole = _part(strategy, 3)
        io.save_checkpoint(part, path)
        return _damage_outcomes(io, path, whole, context)

    _dckpt(
        target,
        "DCKPT-3",
        "raise CheckpointNotFoundError for a missing checkpoint and CheckpointCorruptedError "
        "naming the path when a file of the checkpoint is missing, truncated or damaged",
        body,
    )


@distributed_check("DCKPT-4", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_remove_is_collective_and_idempotent(target: Target[Strategy]) -> None:
    """After a collective remove the checkpoint is gone everywhere; removing again is harmless;
    other paths are untouched."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        path = os.path.join(context.shared_dir, "removed")
        other = os.path.join(context.shared_dir, "kept")
        part, whole = _part(strategy, 4)
        io.save_checkpoint(part, path)
        io.save_checkpoint(part, other)
        io.remove_checkpoint(path)
        try:
            io.load_checkpoint(path)
            return "the checkpoint still loads after remove_checkpoint returned"
        except CheckpointNotFoundError:
            pass
        io.remove_checkpoint(path)
        problem = _difference(io.load_checkpoint(other), whole)
        return None if problem is None else f"another path changed: {problem}"

    _dckpt(
        target,
        "DCKPT-4",
        "remove the checkpoint for every rank before returning, harmlessly again, and leave "
        "other paths alone",
        body,
    )


@distributed_check("DCKPT-5", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_reshards_between_two_ranks_and_one(target: Target[Strategy]) -> None:
    """Saved on N ranks it must load in one process; saved by one rank alone (an instance not
    set up) it must load on every rank."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        path = os.path.join(context.shared_dir, "n-to-one")
        part, whole = _part(strategy, 5)
        io.save_checkpoint(part, path)
        problem = None
        if context.rank == 0:
            problem = _difference(io.load_checkpoint(path), whole)
        context.barrier()
        if problem is not None:
            return f"saved on {context.world_size} ranks, loaded by one process: {problem}"
        one = os.path.join(context.shared_dir, "one-to-n")
        lone = target.make()  # not set up: its IO works on one rank
        try:
            if context.rank == 0:
                lone_io = lone.checkpoint_io
                lone_io.save_checkpoint(whole, one)
            context.barrier()
        finally:
            teardown_quietly(lone)
        problem = _difference(io.load_checkpoint(one), whole)
        return None if problem is None else f"saved by one rank, loaded on every rank: {problem}"

    _dckpt(
        target,
        "DCKPT-5",
        "load a checkpoint saved on N ranks in one process, and one saved by one rank on N",
        body,
    )


@distributed_check("DCKPT-6", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_failure_on_one_rank_reaches_every_rank(target: Target[Strategy]) -> None:
    """A part that cannot be saved on one rank must make every rank raise, keeping the old
    checkpoint."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        path = os.path.join(context.shared_dir, "failing")
        part, whole = _part(strategy, 6)
        io.save_checkpoint(part, path)
        bad, _ = _part(strategy, 7)
        failing = context.world_size - 1
        if context.rank == failing:
            bad["unstorable"] = object()
        try:
            io.save_checkpoint(bad, path)
            outcome = "returned"
        except TypeError:
            outcome = "TypeError"
        except (CheckpointError, CollectiveError) as error:
            outcome = type(error).__name__
        except Exception as error:
            outcome = describe_exception(error)
        if context.rank == failing and outcome != "TypeError":
            return f"the rank whose part held an object() did not raise TypeError ({outcome})"
        if context.rank != failing and outcome == "returned":
            return "save_checkpoint returned although another rank failed"
        if context.rank != failing and outcome not in (
            "CheckpointWriteError",
            "CheckpointError",
            "CollectiveError",
            "CollectiveTimeoutError",
            "PeerFailureError",
            "CheckpointCorruptedError",
            "CheckpointNotFoundError",
            "UnsafeCheckpointError",
        ):
            return f"another rank's failure surfaced here as {outcome}"
        problem = _difference(io.load_checkpoint(path), whole)
        return None if problem is None else f"the previous checkpoint changed: {problem}"

    _dckpt(
        target,
        "DCKPT-6",
        "raise on every rank when one rank's part cannot be saved (TypeError there, a "
        "CheckpointError or CollectiveError elsewhere) and keep the previous checkpoint",
        body,
        hint="Agree on every rank's outcome (for example all_gather_object) before committing.",
    )


@distributed_check("DCKPT-7", "strategy", requires=("sharded_checkpoint",))
def check_dckpt_teardown_unbinds_and_is_idempotent(target: Target[Strategy]) -> None:
    """teardown must be idempotent and leave an instance that works on one rank."""

    def body(strategy: Strategy, io: DistributedCheckpointIO, context: RankContext) -> str | None:
        del io
        lone = target.make()
        try:
            lone_io = lone.checkpoint_io
            if not isinstance(lone_io, DistributedCheckpointIO):
                return f"a fresh strategy's checkpoint_io is a {type(lone_io).__qualname__}"
            lone_io.teardown()
            lone_io.teardown()
            path = os.path.join(context.shared_dir, f"alone-{context.rank}")
            _, whole = _part(strategy, 8)
            lone_io.save_checkpoint(whole, path)
            problem = _difference(lone_io.load_checkpoint(path), whole)
            lone_io.remove_checkpoint(path)
            lone_io.remove_checkpoint(path)
            return None if problem is None else f"after teardown, on one rank: {problem}"
        finally:
            teardown_quietly(lone)

    _dckpt(
        target,
        "DCKPT-7",
        "tear down idempotently and then work on one rank as a CheckpointIO",
        body,
    )
