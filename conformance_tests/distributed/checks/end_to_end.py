"""End-to-end checks of :class:`trainspec.Strategy` (E2E-1 ... E2E-3), driven through the
Strategy protocol on every rank: data-parallel training equals one plain PyTorch loop on the
whole batch; save, stop and resume continues bit for bit; a checkpoint moves from N ranks
into the reference single-device strategy and back."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, cast

import torch

from trainspec.conformance.distributed.checks._support import (
    agree,
    distributed_check,
    float_option,
    guarded,
    rank_context,
    set_up_strategy,
    teardown_quietly,
)
from trainspec.conformance.distributed.checks._training import (
    PER_RANK_BATCH,
    build_model,
    compare_states,
    full_batch,
    make_optimizer,
    mse_loss,
    rank_batch,
    set_up_training,
    state_of,
    train_step,
)
from trainspec.distributed_checkpoint_io import CheckpointLayoutControl

if TYPE_CHECKING:
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.conformance.core import Target
    from trainspec.strategy import Strategy


_E2E_STEPS: Final = 3
__all__ = [
    "check_strategy_checkpoint_moves_between_n_ranks_and_one",
    "check_strategy_data_parallel_training_equals_single_device_on_the_whole_batch",
    "check_strategy_resume_from_checkpoint_continues_exactly",
]

# --------------------------------------------------------------------------- end to end


@distributed_check("E2E-1", "strategy", layer="end_to_end")
def check_strategy_data_parallel_training_equals_single_device_on_the_whole_batch(
    target: Target[Strategy],
) -> None:
    """N ranks with batch B each must train to the weights of one plain loop on the N*B batch."""
    plain = cast("Target[object]", target)
    rtol, atol = float_option(plain, "e2e_rtol", 1e-4), float_option(plain, "e2e_atol", 1e-5)
    with set_up_strategy(target) as (strategy, context):
        world, rank, seed = context.world_size, context.rank, 21

        def body() -> str | None:
            module, optimizer = set_up_training(strategy, seed)
            reference = build_model(seed)
            reference_optimizer = make_optimizer(reference.parameters())
            for step in range(_E2E_STEPS):
                train_step(strategy, module, optimizer, rank_batch(step, rank, world))
                x, y = full_batch(step, world)
                torch.autograd.backward(mse_loss(reference(x), y))
                reference_optimizer.step()
                reference_optimizer.zero_grad(set_to_none=True)
            want = {k: v.detach().clone() for k, v in reference.state_dict().items()}
            problem = compare_states(state_of(strategy, module), want, rtol, atol)
            return None if problem is None else f"after {_E2E_STEPS} SGD steps: {problem}"

        agree(
            plain,
            context,
            "E2E-1",
            guarded(body),
            expected=f"train {world} ranks with batch {PER_RANK_BATCH} each to the weights of "
            f"single-device training on the {world * PER_RANK_BATCH} batch",
            hint="Average gradients over ranks; parameters must start equal on every rank.",
        )


@distributed_check("E2E-2", "strategy", layer="end_to_end")
def check_strategy_resume_from_checkpoint_continues_exactly(target: Target[Strategy]) -> None:
    """Saving, stopping and resuming must continue bit for bit as if never stopped."""
    plain = cast("Target[object]", target)
    context = rank_context(plain)
    world, rank = context.world_size, context.rank
    path = os.path.join(context.shared_dir, "resume.ckpt")
    half = 2

    def run_straight() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        strategy = target.make()
        strategy.setup_environment()
        try:
            module, optimizer = set_up_training(strategy, seed=31)
            for step in range(half):
                train_step(strategy, module, optimizer, rank_batch(step, rank, world))
            saved = state_of(strategy, module)
            strategy.save_checkpoint(
                {
                    "module": strategy.module_state_dict(module),
                    "optimizer": strategy.optimizer_state_dict(optimizer),
                    "precision": strategy.precision.state_dict(),
                    "step": half,
                },
                path,
            )
            for step in range(half, 2 * half):
                train_step(strategy, module, optimizer, rank_batch(step, rank, world))
            return saved, state_of(strategy, module)
        finally:
            teardown_quietly(strategy)

    def run_resumed(saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | str:
        strategy = target.make()
        strategy.setup_environment()
        try:
            module, optimizer = set_up_training(strategy, seed=32)
            if compare_states(state_of(strategy, module), saved, 0.0, 0.0) is None:
                raise AssertionError("the fresh module must differ from the checkpoint")
            checkpoint = strategy.load_checkpoint(path)
            strategy.load_module_state_dict(module, checkpoint["module"])
            strategy.load_optimizer_state_dict(optimizer, checkpoint["optimizer"])
            strategy.precision.load_state_dict(checkpoint["precision"])
            if checkpoint.get("step") != half:
                return f"the checkpoint's step is {checkpoint.get('step')!r}, expected {half}"
            for step in range(int(checkpoint["step"]), 2 * half):
                train_step(strategy, module, optimizer, rank_batch(step, rank, world))
            return state_of(strategy, module)
        finally:
            teardown_quietly(strategy)

    def body() -> str | None:
        saved, straight = run_straight()
        context.barrier()  # every rank has left the first process group
        resumed = run_resumed(saved)
        if isinstance(resumed, str):
            return resumed
        problem = compare_states(resumed, straight, 0.0, 0.0)
        return None if problem is None else f"the resumed run's {problem}"

    agree(
        plain,
        context,
        "E2E-2",
        guarded(body),
        expected="continue after save, teardown, a new strategy and load exactly as the "
        "uninterrupted run (bit for bit)",
        hint="Save and restore the module, the optimizer (momentum buffers) and the precision.",
    )


def _single_device_strategy(
    device: torch.device, checkpoint_io: CheckpointIO | None = None
) -> Strategy:
    """The reference single-device strategy on ``device``, for a world of one; with
    ``checkpoint_io`` (default: the reference torch IO)."""
    from trainspec.conformance.fakes import StaticEnvironment
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy

    if device.type == "cpu":
        return SingleDeviceStrategy(
            cluster_environment=StaticEnvironment(world_size=1), checkpoint_io=checkpoint_io
        )
    from trainspec.reference.accelerators.generic import TorchDeviceAccelerator

    return SingleDeviceStrategy(
        accelerator=TorchDeviceAccelerator(device.type),
        cluster_environment=StaticEnvironment(world_size=1),
        parallel_devices=[device],
        checkpoint_io=checkpoint_io,
    )


def _reader_for(target: Target[Strategy], strategy: Strategy) -> CheckpointIO | None:
    """Under the sharded layout (LAYOUT-1) the single-device side reads and writes with a
    fresh instance of the strategy's own DistributedCheckpointIO, not set up: on one rank it
    is a CheckpointIO (DCKPT-5, DCKPT-7). Under the full layout: the reference torch IO."""
    if not (
        isinstance(strategy, CheckpointLayoutControl) and strategy.checkpoint_layout == "sharded"
    ):
        return None
    return target.make().checkpoint_io


@distributed_check("E2E-3", "strategy", layer="end_to_end")
def check_strategy_checkpoint_moves_between_n_ranks_and_one(target: Target[Strategy]) -> None:
    """A checkpoint from N ranks must load into a single-device strategy, and back."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank
        from_n = os.path.join(context.shared_dir, "from_n_ranks.ckpt")
        from_one = os.path.join(context.shared_dir, "from_one_rank.ckpt")
        probe = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)

        def single_side(expected: dict[str, torch.Tensor]) -> str | None:
            single = _single_device_strategy(strategy.root_device, _reader_for(target, strategy))
            single.setup_environment()
            try:
                module, optimizer = set_up_training(single, seed=42)
                checkpoint = single.load_checkpoint(from_n)
                single.load_module_state_dict(module, checkpoint["module"], strict=True)
                if compare_states(state_of(single, module), expected, 0.0, 0.0) is not None:
                    return "the single-device strategy did not load the N-rank weights exactly"
                train_step(single, module, optimizer, full_batch(5, world))
                single.save_checkpoint({"module": single.module_state_dict(module)}, from_one)
                return None
            finally:
                teardown_quietly(single)

        def body() -> str | None:
            module, optimizer = set_up_training(strategy, seed=41)
            train_step(strategy, module, optimizer, rank_batch(0, rank, world))
            trained = state_of(strategy, module)
            strategy.save_checkpoint({"module": strategy.module_state_dict(module)}, from_n)
            problem = guarded(lambda: single_side(trained)) if rank == 0 else None
            shared = context.exchange(problem)[0]
            if shared is not None:
                return f"into one rank: {shared}"
            loaded = strategy.load_checkpoint(from_one)
            strategy.load_module_state_dict(module, loaded["module"], strict=True)
            back = state_of(strategy, module)
            want = {k: v.detach().to("cpu") for k, v in loaded["module"].items()}
            problem = compare_states(back, want, 0.0, 0.0)
            if problem is not None:
                return f"back into {world} ranks: {problem}"
            x = strategy.batch_to_device(probe)
            with torch.no_grad(), strategy.forward_context():
                output = module(x).detach().to("cpu", torch.float32)
            outputs = context.exchange(output)
            if any(not torch.equal(o, outputs[0]) for o in outputs):
                return (
                    "after loading the single-device checkpoint the ranks compute different outputs"
                )
            return None

        agree(
            plain,
            context,
            "E2E-3",
            guarded(body),
            expected="save a checkpoint on N ranks that loads (strict) into the reference "
            "single-device strategy, and load that strategy's checkpoint back on N ranks",
            hint="State-dict keys must carry no wrapper prefix (STRAT-14).",
        )
