"""SYNC-1, SHARD-1, STEP-1: the optional protocols (capabilities ``backward_sync``,
``sharded_module``, ``step_boundary``, inferred with ``isinstance``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from trainspec.capabilities import BackwardSyncControl, ShardedModuleContext, StepBoundary
from trainspec.conformance._helpers import describe_exception, failure
from trainspec.conformance.checks.collective import show, values
from trainspec.conformance.checks.strategy._fixtures import (
    _LR,
    ProbeNet,
    _backward_on_rank_batch,
    _close,
    _complete,
    _expected_grads,
    _gradient_failure,
    _grads,
    _need_predictable,
    _own_parameters,
    _rtol,
    _set_up,
    _snippet,
    _train_parts,
    _unscale,
    _world_batches,
    probe_batch,
    probe_module,
)
from trainspec.conformance.core import Target, check

if TYPE_CHECKING:
    from trainspec.strategy import Strategy

# ----------------------------------------------------------------------- SYNC-1, SHARD-1, STEP-1


@check("SYNC-1", "strategy", requires=("backward_sync",))
def check_strategy_no_backward_sync_accumulation_equals_one_large_step(
    target: Target[Strategy],
) -> None:
    """Accumulating K micro-batches under no_backward_sync must equal one step on their union."""
    micro, count = 3, 3
    with _set_up(target) as strategy:
        if not isinstance(strategy, BackwardSyncControl):
            raise failure(
                target,
                "SYNC-1",
                expected="implement trainspec.BackwardSyncControl (declared 'backward_sync')",
                actual=f"{type(strategy).__name__} has no no_backward_sync",
                snippet=_snippet(target, "strategy.no_backward_sync", set_up=False),
            )
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        with strategy.no_backward_sync(module, enabled=False):
            pass  # a no-op context must still be usable
        inputs, targets = probe_batch(strategy.global_rank, size=micro * count)
        for index in range(count):
            part = slice(index * micro, (index + 1) * micro)
            batch = (inputs[part], targets[part])
            if index < count - 1:
                with strategy.no_backward_sync(module):
                    _backward_on_rank_batch(strategy, module, batch, scale=1 / count)
            else:
                _backward_on_rank_batch(strategy, module, batch, scale=1 / count)
        _unscale(target, "SYNC-1", strategy, optimizer)
        batches = [probe_batch(r, size=micro * count) for r in range(strategy.world_size)]
        _gradient_failure(
            target,
            "SYNC-1",
            f"accumulate {count} micro-batches (all but the last under no_backward_sync) into "
            "the gradients of one step on their union",
            _grads(parameters),
            _expected_grads(batches),
            _rtol(strategy.precision) * 2,
        )


@check("SHARD-1", "strategy", requires=("sharded_module",))
def check_strategy_sharded_module_context_builds_modules_that_train_alike(
    target: Target[Strategy],
) -> None:
    """A module built in sharded_module_context must train like one built outside it."""
    with _set_up(target) as strategy:
        if not isinstance(strategy, ShardedModuleContext):
            raise failure(
                target,
                "SHARD-1",
                expected="implement trainspec.ShardedModuleContext (declared 'sharded_module')",
                actual=f"{type(strategy).__name__} has no sharded_module_context",
            )
        _need_predictable(target, strategy)
        with strategy.sharded_module_context():
            built = ProbeNet()
        module = strategy.setup_module(built)
        strategy.load_module_state_dict(module, probe_module().state_dict())
        optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr=_LR))
        _backward_on_rank_batch(strategy, module)
        strategy.optimizer_step(optimizer)
        trained = cast("dict[str, torch.Tensor]", _complete(strategy.module_state_dict(module)))
        grads = _expected_grads(_world_batches(strategy))
        names = [name for name, _ in probe_module().named_parameters()]
        start = dict(probe_module().named_parameters())
        rtol = max(_rtol(strategy.precision), 1e-6) * 4
        for name, grad in zip(names, grads, strict=True):
            before = start[name].detach().double()
            update = trained[name].detach().to("cpu", torch.float64) - before
            if not _close(update, -_LR * grad, rtol):
                raise failure(
                    target,
                    "SHARD-1",
                    expected="train a module built in sharded_module_context() like one "
                    "built outside it (one SGD step)",
                    actual=f"{name} moved by {show(update)} instead of {values(-_LR * grad)}",
                    snippet=_snippet(
                        target,
                        "from trainspec.conformance.checks.strategy import ProbeNet\n"
                        "with strategy.sharded_module_context():\n    built = ProbeNet()\n"
                        "module = strategy.setup_module(built)",
                    ),
                )


@check("STEP-1", "strategy", requires=("step_boundary",))
def check_strategy_mark_step_materialises_pending_computation(target: Target[Strategy]) -> None:
    """After mark_step, tensors computed before it must hold their values; repeats are safe."""
    with _set_up(target) as strategy:
        if not isinstance(strategy, StepBoundary):
            raise failure(
                target,
                "STEP-1",
                expected="implement trainspec.StepBoundary (declared 'step_boundary')",
                actual=f"{type(strategy).__name__} has no mark_step",
            )
        values = strategy.batch_to_device(torch.arange(6, dtype=torch.float32))
        result = values * 2 + 1
        repro = _snippet(
            target,
            "t = strategy.batch_to_device(torch.arange(6.0)) * 2 + 1\n"
            "strategy.mark_step()\nstrategy.mark_step()\nprint(t.cpu())",
        )
        try:
            strategy.mark_step()
            strategy.mark_step()
        except Exception as error:
            raise failure(
                target,
                "STEP-1",
                expected="accept mark_step() at any time after setup, repeatedly",
                actual=describe_exception(error),
                snippet=repro,
            ) from error
        want = torch.arange(6, dtype=torch.float64) * 2 + 1
        if not _close(result.cpu(), want, _rtol(strategy.precision)):
            raise failure(
                target,
                "STEP-1",
                expected="keep the values of tensors computed before mark_step()",
                actual=show(result.cpu()),
                snippet=repro,
            )
