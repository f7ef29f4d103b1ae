"""Fixtures and helpers shared by the Strategy checks: the probe module and data, set-up and
teardown, independent float64 expectations, tolerances by precision and reproduction snippets."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Final, cast

import torch
from torch.utils.data import Dataset

from trainspec.conformance._helpers import describe_exception, failure, snippet
from trainspec.conformance.checks.collective import show, values
from trainspec.conformance.core import CheckSkipped, Target

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec.precision import Precision
    from trainspec.strategy import Strategy

_LR: Final = 0.5
_BATCH: Final = 6

# Relative error allowed (in norm) per dtype; the loosest of the precision's dtypes applies.
_RTOL: Final = {
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 2e-2,
    torch.bfloat16: 6e-2,
}


# --------------------------------------------------------------------------- the probe


class ProbeNet(torch.nn.Module):
    """The module the strategy checks train: ``4 -> 8 (tanh) -> 3`` and an int64 buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(4, 8)
        self.out = torch.nn.Linear(8, 3)
        self.register_buffer("version", torch.tensor(3, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.out(torch.tanh(self.hidden(x)))
        return result


def probe_module(seed: int = 0) -> ProbeNet:
    """A :class:`ProbeNet` with deterministic weights; the global RNG is left untouched."""
    with torch.random.fork_rng(devices=[]):
        module = ProbeNet()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            values = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_(values * 0.5)
    return module


def probe_batch(rank: int, size: int = _BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s deterministic batch ``(inputs (size, 4), targets (size, 3))``."""
    generator = torch.Generator().manual_seed(1000 + rank)
    inputs = torch.randn(size, 4, generator=generator)
    targets = torch.randn(size, 3, generator=generator)
    return inputs, targets


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, target.to(output.dtype))


def _expected_grads(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """float64 gradients of the mean-squared error, averaged over ``batches`` (one per rank)."""
    total: list[torch.Tensor] | None = None
    for inputs, targets in batches:
        module = probe_module().double()
        loss = _mse(module(inputs.double()), targets.double())
        grads = torch.autograd.grad(loss, list(module.parameters()))
        total = list(grads) if total is None else [t + g for t, g in zip(total, grads, strict=True)]
    assert total is not None
    return [t / len(batches) for t in total]


# --------------------------------------------------------------------------- helpers


def _teardown_quietly(strategy: Strategy) -> None:
    # Cleanup after a check; STRAT-4 checks teardown itself.
    try:
        strategy.teardown()
    except Exception:
        pass


@contextmanager
def _set_up(target: Target[Strategy]) -> Iterator[Strategy]:
    # The global CPU RNG is restored afterwards: module construction and dataloader
    # iteration draw from it, and a check must not change the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        strategy = target.make()
        strategy.setup_environment()
        try:
            yield strategy
        finally:
            _teardown_quietly(strategy)


def _snippet(target: Target[Strategy], body: str, *, set_up: bool = True) -> str:
    head = "strategy.setup_environment()\n" if set_up else ""
    return snippet(
        target,
        head + body,
        var="strategy",
        imports="from trainspec.conformance.checks.strategy import probe_batch, probe_module",
    )


_TRAIN_LINES: Final = (
    "module = strategy.setup_module(probe_module())\n"
    f"optimizer = strategy.setup_optimizer(torch.optim.SGD(module.parameters(), lr={_LR}))\n"
    "x, y = strategy.batch_to_device(probe_batch(strategy.global_rank))\n"
    "with strategy.forward_context():\n"
    "    loss = torch.nn.functional.mse_loss(module(x), y)\n"
    "strategy.backward(loss, module)\n"
)


def _rtol(precision: Precision) -> float:
    return max(_RTOL.get(precision.param_dtype, 1e-4), _RTOL.get(precision.compute_dtype, 1e-4))


def _close(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> bool:
    """``actual`` is ``expected`` within ``rtol`` relative error in norm (shape must match)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    got = actual.detach().to("cpu", torch.float64)
    want = expected.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(got).all()):
        return False
    error = float(torch.linalg.vector_norm(got - want))
    return error <= rtol * float(torch.linalg.vector_norm(want)) + rtol * 1e-2


def _need_predictable(target: Target[Strategy], strategy: Strategy) -> None:
    if strategy.world_size > 1 and "data_parallel" not in target.capabilities:
        raise CheckSkipped(
            "predicting results with more than one rank needs the 'data_parallel' capability"
        )


def _own_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The set-up module's parameters, when they are the probe's (same shapes, same order)."""
    parameters = list(module.parameters())
    shapes = [tuple(p.shape) for p in probe_module().parameters()]
    if [tuple(p.shape) for p in parameters] != shapes:
        raise CheckSkipped(
            "the set-up module's parameters are not the module's own (sharded or flattened); "
            "gradient and parameter checks need full parameters"
        )
    return parameters


def _train_parts(
    strategy: Strategy, *, optimizer: Callable[..., torch.optim.Optimizer] | None = None
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    module = strategy.setup_module(probe_module())
    make = optimizer or partial(torch.optim.SGD, lr=_LR)
    return module, strategy.setup_optimizer(make(module.parameters()))


def _backward_on_rank_batch(
    strategy: Strategy,
    module: torch.nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor] | None = None,
    scale: float = 1.0,
) -> None:
    inputs, targets = strategy.batch_to_device(batch or probe_batch(strategy.global_rank))
    with strategy.forward_context():
        loss = _mse(module(inputs), targets) * scale
    strategy.backward(loss, module)


def _world_batches(strategy: Strategy) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [probe_batch(rank) for rank in range(strategy.world_size)]


def _grads(parameters: list[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    """The complete gradients (sharded ones gathered, STRAT-9)."""
    return [
        None if p.grad is None else cast("torch.Tensor", _complete(p.grad.detach()))
        for p in parameters
    ]


def _same_device(actual: torch.device, expected: torch.device) -> bool:
    if actual.type != expected.type:
        return False
    return actual.index is None or expected.index is None or actual.index == expected.index


def _complete(value: object) -> object:
    """``value`` with every sharded tensor (one with ``full_tensor()``, a ``DTensor``) replaced
    by its complete value, containers rebuilt: state dicts under the sharded checkpoint layout
    hold sharded tensors (STRAT-14, STRAT-15). Every rank must call it on the same structure,
    since ``full_tensor()`` is a collective."""
    full_tensor = getattr(value, "full_tensor", None)
    if isinstance(value, torch.Tensor) and callable(full_tensor):
        whole = full_tensor()
        return whole if isinstance(whole, torch.Tensor) else value
    if isinstance(value, dict):
        return {key: _complete(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_complete(item) for item in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_complete(item) for item in value)
    return value


class IndexDataset(Dataset[int]):
    """A map-style dataset whose samples are their own indices."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return index


# --------------------------------------------------------------------------- STRAT-9 ... STRAT-11


def _gradient_failure(
    target: Target[Strategy],
    clause: str,
    expected: str,
    got: list[torch.Tensor | None],
    want: list[torch.Tensor],
    rtol: float,
) -> None:
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        if g is None or not _close(g, w, rtol):
            raise failure(
                target,
                clause,
                expected=f"{expected} (within relative error {rtol:g})",
                actual=f"parameter {index}: gradient {show(g)} where {values(w)} was expected",
                snippet=_snippet(
                    target,
                    _TRAIN_LINES
                    + "strategy.precision.unscale_gradients(optimizer)\n"
                    + "print([p.grad for p in module.parameters()])",
                ),
            )


def _unscale(
    target: Target[Strategy], clause: str, strategy: Strategy, optimizer: torch.optim.Optimizer
) -> None:
    """Bring the gradients to their true scale through the strategy's precision; a precision
    that cannot means backward did not go through it."""
    try:
        strategy.precision.unscale_gradients(optimizer)
    except Exception as error:
        raise failure(
            target,
            clause,
            expected="run backward through the precision, leaving gradients that "
            "precision.unscale_gradients(optimizer) can unscale",
            actual=describe_exception(error),
            hint="Call precision.backward(tensor, module) in backward.",
            snippet=_snippet(
                target, _TRAIN_LINES + "strategy.precision.unscale_gradients(optimizer)"
            ),
        ) from error
