"""Fixtures and helpers shared by the Precision checks: set-up on the target's device, the probe
module and its input, reference gradients by plain autograd, comparisons and snippets."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Final

import torch
from torch import nn

from trainspec.conformance._helpers import describe_exception, failure, snippet
from trainspec.conformance.core import CheckSkipped, Target
from trainspec.errors import UnsupportedError
from trainspec.precision import Precision

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trainspec.types import PrecisionFlag

FLAG_DTYPES: Final[Mapping[PrecisionFlag, tuple[torch.dtype, torch.dtype]]] = {
    "32-true": (torch.float32, torch.float32),
    "64-true": (torch.float64, torch.float64),
    "16-true": (torch.float16, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}
"""PREC-1: flag -> (parameter dtype, compute dtype)."""

_Target = Target[Precision]
_RTOL: Final = 0.05


def _device(target: _Target) -> torch.device:
    value = target.options.get("device", "cpu")
    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"conformance option 'device' must be a str or torch.device: {value!r}")
    return torch.device(value)


def _setup(target: _Target, precision: Precision, device: torch.device) -> None:
    """``precision.setup(device)``; UnsupportedError skips, anything else fails PREC-2."""
    try:
        precision.setup(device)
    except UnsupportedError as exc:
        raise CheckSkipped(
            f"{precision.flag!r} is not supported on {device} ({describe_exception(exc)})"
        ) from exc
    except Exception as exc:
        raise failure(
            target,
            "PREC-2",
            expected=f"either set up on {device} or raise UnsupportedError",
            actual=describe_exception(exc),
            snippet=snippet(target, f"p.setup(torch.device({str(device)!r}))", var="p"),
        ) from exc


def _ready(target: _Target) -> tuple[Precision, torch.device]:
    precision = target.make()
    device = _device(target)
    _setup(target, precision, device)
    return precision, device


class _Probe(nn.Module):
    """Two linear layers with a float, an int64 and a bool buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.second = nn.Linear(8, 2)
        self.register_buffer("running", torch.ones(3))
        self.register_buffer("steps", torch.tensor([7, -3], dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([True, False]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = torch.relu(self.first(x))
        out: torch.Tensor = self.second(hidden)
        return out


def _probe(device: torch.device) -> _Probe:
    generator = torch.Generator().manual_seed(0)
    module = _Probe()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return module.to(device)


def _probe_input(device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(6, 4, generator=generator).to(device)


_PROBE_SNIPPET = """
module = p.convert_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                              torch.nn.Linear(8, 2)))
x = p.convert_input(torch.randn(6, 4))
"""


def _loss(output: torch.Tensor) -> torch.Tensor:
    # Small enough that a 2**16 loss scale does not overflow float16 gradients.
    return output.float().mean() * 2.0**-6


def _forward_loss(precision: Precision, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with precision.forward_context():
        return _loss(module(x))


def _reference_grads(
    precision: Precision, module: nn.Module, x: torch.Tensor
) -> list[torch.Tensor]:
    """Gradients of the probe loss by plain autograd on a copy, in the parameter dtype."""
    reference = copy.deepcopy(module)
    for param in reference.parameters():
        param.grad = None
    dtype = next(reference.parameters()).dtype
    torch.autograd.backward(_loss(reference(x.to(dtype))))
    return [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().clone()
        for p in reference.parameters()
    ]


def _grads(module: nn.Module) -> list[torch.Tensor]:
    return [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().clone()
        for p in module.parameters()
    ]


def _ratio(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """|actual| / |expected| summed over all gradients: the applied loss scale."""
    num = sum(float(a.abs().sum()) for a in actual)
    den = sum(float(e.abs().sum()) for e in expected)
    return num / den if den else float("nan")


def _setting_up(target: _Target) -> tuple[Precision, torch.device, nn.Module, torch.Tensor]:
    precision, device = _ready(target)
    module = precision.convert_module(_probe(device))
    x = precision.convert_input(_probe_input(device))
    return precision, device, module, x


# --------------------------------------------------------------------------- PREC-2


def _run_probe_step(precision: Precision, device: torch.device) -> torch.dtype:
    module = precision.convert_module(_probe(device))
    x = precision.convert_input(_probe_input(device))
    with precision.forward_context():
        out: torch.Tensor = module(x)
    return out.dtype


# --------------------------------------------------------------------------- PREC-9, PREC-10


def _measure_scale(
    precision: Precision, module: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer
) -> float:
    optimizer.zero_grad(set_to_none=True)
    expected = _reference_grads(precision, module, x)
    precision.backward(_forward_loss(precision, module, x), module)
    return _ratio(_grads(module), expected)
