"""STRAT-8 ... STRAT-11: dataloader shares are disjoint and complete, backward produces the
synchronised gradients, the optimizer steps through the precision, and clipping returns the
global norm."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import torch
from torch.utils.data import DataLoader

from trainspec.conformance._helpers import describe_value, failure
from trainspec.conformance.checks.collective import show, values
from trainspec.conformance.checks.strategy._fixtures import (
    _LR,
    _TRAIN_LINES,
    IndexDataset,
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
    probe_module,
)
from trainspec.conformance.core import Target, check
from trainspec.errors import TrainspecError

if TYPE_CHECKING:
    from trainspec.strategy import Strategy


def _norm(tensors: list[torch.Tensor], norm_type: float = 2.0) -> float:
    flat = torch.cat([t.detach().to("cpu", torch.float64).reshape(-1) for t in tensors])
    return float(torch.linalg.vector_norm(flat, norm_type))


def _samples_seen(loader: object) -> list[int]:
    seen: list[int] = []
    for batch in loader:  # type: ignore[attr-defined]
        values = batch if isinstance(batch, torch.Tensor) else torch.as_tensor(batch)
        seen.extend(int(v) for v in values.reshape(-1).tolist())
    return seen


@check("STRAT-8", "strategy")
def check_strategy_process_dataloader_shares_are_disjoint_and_complete(
    target: Target[Strategy],
) -> None:
    """process_dataloader must give ranks disjoint shares that together cover every sample."""
    size = 11
    with _set_up(target) as strategy:
        world = strategy.world_size
        loader: DataLoader[int] = DataLoader(IndexDataset(size), batch_size=3, shuffle=False)
        mine = _samples_seen(strategy.process_dataloader(loader))
        everyone = _gather_lists(strategy, mine)
        padded = math.ceil(size / world) * world
        flat = [sample for share in everyone for sample in share]
        missing = sorted(set(range(size)) - set(flat))
        foreign = sorted(set(flat) - set(range(size)))
        repeated = len(flat) - len(set(flat))
        if missing or foreign or repeated > padded - size:
            raise failure(
                target,
                "STRAT-8",
                expected=f"give the {world} rank(s) disjoint shares covering all {size} "
                f"samples (at most {padded - size} repeated as padding)",
                actual=f"shares {everyone}: missing {missing}, unknown {foreign}, "
                f"{repeated} repeated",
                hint="Use a distributed sampler over the whole dataset; never drop the last "
                "partial batch.",
                snippet=_snippet(
                    target,
                    "from trainspec.conformance.checks.strategy import IndexDataset\n"
                    "from torch.utils.data import DataLoader\n"
                    f"loader = DataLoader(IndexDataset({size}), batch_size=3)\n"
                    "print([b.tolist() for b in strategy.process_dataloader(loader)])",
                ),
            )


def _gather_lists(strategy: Strategy, mine: list[int]) -> list[list[int]]:
    """Every rank's list of ints, through the strategy's own all_gather."""
    if strategy.world_size == 1:
        return [mine]
    device = strategy.root_device
    counts = strategy.all_gather(torch.tensor([len(mine)], device=device))
    longest = max(int(c.item()) for c in counts)
    padded = torch.full((longest,), -1, dtype=torch.int64, device=device)
    padded[: len(mine)] = torch.tensor(mine, dtype=torch.int64)
    gathered = strategy.all_gather(padded)
    return [
        [int(v) for v in values.tolist()[: int(count.item())]]
        for values, count in zip(gathered, counts, strict=True)
    ]


@check("STRAT-9", "strategy")
def check_strategy_backward_produces_the_synchronised_gradients(target: Target[Strategy]) -> None:
    """backward must produce the true gradients, averaged over ranks when data-parallel."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        _unscale(target, "STRAT-9", strategy, optimizer)
        _gradient_failure(
            target,
            "STRAT-9",
            "produce the gradients of the loss (the mean over ranks' gradients) after backward",
            _grads(parameters),
            _expected_grads(_world_batches(strategy)),
            _rtol(strategy.precision),
        )
        # Gradients made outside the precision (e.g. an unscaled backward under gradient
        # scaling) can look right yet leave the precision unable to step: it must accept them.
        try:
            strategy.optimizer_step(optimizer)
        except TrainspecError as error:
            raise failure(
                target,
                "STRAT-9",
                expected=(
                    "run backward through its precision, so that the precision's "
                    "optimizer_step accepts the gradients"
                ),
                actual=f"optimizer_step after backward raised {type(error).__name__}: {error}",
                hint="Call self.precision.backward(tensor, module) in backward.",
                snippet=_snippet(target, _TRAIN_LINES + "strategy.optimizer_step(optimizer)"),
            ) from error


@check("STRAT-10", "strategy")
def check_strategy_optimizer_step_updates_the_parameters(target: Target[Strategy]) -> None:
    """optimizer_step must step the optimizer through the precision and return True."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        stepped = strategy.optimizer_step(optimizer)
        grads = _expected_grads(_world_batches(strategy))
        start = [p.detach().double() for p in probe_module().parameters()]
        want = [p - _LR * g for p, g in zip(start, grads, strict=True)]
        rtol = _rtol(strategy.precision)
        repro = _snippet(
            target,
            _TRAIN_LINES + "print(strategy.optimizer_step(optimizer), list(module.parameters()))",
        )
        if stepped is not True:
            raise failure(
                target,
                "STRAT-10",
                expected="return True from optimizer_step when the parameters were updated",
                actual=describe_value(stepped),
                snippet=repro,
            )
        for index, (p, w, s) in enumerate(zip(parameters, want, start, strict=True)):
            whole = cast("torch.Tensor", _complete(p.detach()))
            update, wanted = whole.double().cpu() - s, w - s
            if not _close(update, wanted, max(rtol, 1e-6) * 4):
                raise failure(
                    target,
                    "STRAT-10",
                    expected=f"update the parameters by one SGD step (lr={_LR})",
                    actual=f"parameter {index} moved by {show(update)} instead of {values(wanted)}",
                    hint="Call the precision's optimizer_step with the optimizer.",
                    snippet=repro,
                )


@check("STRAT-11", "strategy")
def check_strategy_clip_gradients_norm_returns_the_global_norm_before_clipping(
    target: Target[Strategy],
) -> None:
    """clip_gradients_norm must clip to max_norm and return the global norm before clipping."""
    with _set_up(target) as strategy:
        _need_predictable(target, strategy)
        module, optimizer = _train_parts(strategy)
        parameters = _own_parameters(module)
        _backward_on_rank_batch(strategy, module)
        total = _norm(_expected_grads(_world_batches(strategy)))
        max_norm = total / 4
        returned = strategy.clip_gradients_norm(module, optimizer, max_norm)
        # torch divides by (norm + 1e-6) when clipping: allow that much below max_norm.
        rtol = max(_rtol(strategy.precision) * 4, 1e-5)
        repro = _snippet(
            target,
            _TRAIN_LINES
            + f"print(strategy.clip_gradients_norm(module, optimizer, max_norm={max_norm:.6g}))",
        )
        value = float(returned) if isinstance(returned, torch.Tensor) else math.nan
        if not isinstance(returned, torch.Tensor) or not abs(value - total) <= rtol * total:
            raise failure(
                target,
                "STRAT-11",
                expected=f"return the total gradient norm before clipping, {total:.6g}",
                actual=f"{describe_value(returned)} = {value:.6g}",
                hint="Return the norm computed before scaling the gradients down, over the "
                "whole model on every rank.",
                snippet=repro,
            )
        grads = [p.grad for p in parameters if p.grad is not None]
        after = _norm(grads) if grads else math.nan
        if not abs(after - max_norm) <= rtol * max_norm:
            raise failure(
                target,
                "STRAT-11",
                expected=f"clip the gradients to max_norm={max_norm:.6g}",
                actual=f"a gradient norm of {after:.6g} after clipping",
                snippet=repro,
            )
