"""The small model, data and plain-PyTorch references the gradient and end-to-end checks
use; every value depends only on seeds, steps and ranks, so every rank can rebuild any
rank's."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from trainspec.strategy import Strategy


__all__ = [
    "PER_RANK_BATCH",
    "backward_on",
    "build_model",
    "compare_states",
    "complete",
    "full_batch",
    "gradients_of",
    "make_optimizer",
    "mismatch",
    "mse_loss",
    "rank_batch",
    "reference_gradients",
    "set_up_training",
    "state_of",
    "train_step",
]

PER_RANK_BATCH: Final = 4
"""Rows of each rank's batch."""


def build_model(seed: int) -> torch.nn.Module:
    """The small model every end-to-end check trains; its weights depend only on ``seed``."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            values = torch.randn(tuple(parameter.shape), generator=generator) * 0.5
            parameter.copy_(values.to(parameter.device, parameter.dtype))
    return model


def full_batch(step: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(10_000 + step)
    rows = world * PER_RANK_BATCH
    return torch.randn(rows, 4, generator=generator), torch.randn(rows, 2, generator=generator)


def rank_batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = full_batch(step, world)
    rows = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
    return x[rows], y[rows]


def make_optimizer(parameters: Iterator[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=0.1, momentum=0.9)


def set_up_training(strategy: Strategy, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    with strategy.module_init_context():
        model = build_model(seed)
    module = strategy.setup_module(model)
    optimizer = strategy.setup_optimizer(make_optimizer(module.parameters()))
    return module, optimizer


def mse_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output.float(), target.float())


def backward_on(
    strategy: Strategy, module: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = strategy.batch_to_device(batch)
    with strategy.forward_context():
        output = module(x)
    strategy.backward(mse_loss(output, y), module)


def train_step(
    strategy: Strategy,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
) -> None:
    backward_on(strategy, module, batch)
    strategy.optimizer_step(optimizer)
    optimizer.zero_grad(set_to_none=True)


def reference_gradients(
    seed: int, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], scale: float = 1.0
) -> list[torch.Tensor]:
    """Gradients of ``scale * sum of the batches' mean losses`` for the plain model."""
    model = build_model(seed)
    total = sum((mse_loss(model(x), y) for x, y in batches), torch.zeros(()))
    torch.autograd.backward(total * scale)
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in model.parameters()
    ]


def complete(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s complete value: ``full_tensor()`` of a sharded tensor (a ``DTensor``, whose
    ranks must all call this together), ``tensor`` itself otherwise (STRAT-9, STRAT-14)."""
    full_tensor = getattr(tensor, "full_tensor", None)
    if callable(full_tensor):
        whole = full_tensor()
        if isinstance(whole, torch.Tensor):
            return whole
    return tensor


def gradients_of(module: torch.nn.Module) -> list[torch.Tensor]:
    return [
        complete(p.grad).detach().to("cpu", torch.float32).clone()
        if p.grad is not None
        else torch.full(tuple(p.shape), float("nan"))
        for p in module.parameters()
    ]


def mismatch(
    got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], rtol: float, atol: float
) -> float | None:
    """None when every pair is close; else the largest absolute difference."""
    worst = 0.0
    ok = len(got) == len(want)
    for a, b in zip(got, want, strict=False):
        a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
        if a64.shape != b64.shape:
            return math.inf
        difference = float((a64 - b64).abs().max()) if a64.numel() else 0.0
        worst = max(worst, difference if not math.isnan(difference) else math.inf)
        ok = ok and bool(torch.allclose(a64, b64, rtol=rtol, atol=atol))
    return None if ok else worst


def state_of(strategy: Strategy, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: complete(v).detach().to("cpu").clone()
        for k, v in strategy.module_state_dict(module).items()
    }


def compare_states(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], rtol: float, atol: float
) -> str | None:
    if set(got) != set(want):
        return f"state dict keys {sorted(got)} differ from the plain module's {sorted(want)}"
    keys = sorted(want)
    worst = mismatch([got[k] for k in keys], [want[k] for k in keys], rtol, atol)
    if worst is None:
        return None
    return (
        f"weights differ from the expected ones by up to {worst:.3g} (rtol={rtol:g}, atol={atol:g})"
    )
