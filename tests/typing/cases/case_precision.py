"""Typing cases for :class:`trainspec.Precision` and the precision flag vocabulary.

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, TypeVar

import torch
from typing_extensions import assert_type

from trainspec import PRECISION_FLAGS, Precision, PrecisionFlag, StateDict

_T = TypeVar("_T")


class _PrecisionCore:
    """Every Precision member except ``flag`` and ``convert_input``."""

    @property
    def param_dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def compute_dtype(self) -> torch.dtype:
        return torch.float32

    def setup(self, device: torch.device) -> None:
        pass

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def module_init_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        pass

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        optimizer.step()
        return True

    def state_dict(self) -> StateDict:
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        pass


# -- positive -------------------------------------------------------------------------------


class Float32(_PrecisionCore):
    @property
    def flag(self) -> PrecisionFlag:
        return "32-true"

    def convert_input(self, data: _T) -> _T:
        return data


class NarrowFlag(_PrecisionCore):
    """A narrower Literal is a compatible (covariant) property type."""

    @property
    def flag(self) -> Literal["32-true"]:
        return "32-true"

    def convert_input(self, data: _T) -> _T:
        return data


precision: Precision = Float32()
narrow: Precision = NarrowFlag()
flags: tuple[PrecisionFlag, ...] = PRECISION_FLAGS
mixed: PrecisionFlag = "bf16-mixed"


def use_precision(
    precision: Precision,
    module: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    pair: tuple[int, str],
) -> None:
    assert_type(precision.flag, PrecisionFlag)
    assert_type(precision.param_dtype, torch.dtype)
    assert_type(precision.compute_dtype, torch.dtype)
    assert_type(precision.convert_module(module), torch.nn.Module)
    assert_type(precision.convert_input(batch), dict[str, torch.Tensor])
    assert_type(precision.convert_input(pair), tuple[int, str])
    assert_type(precision.module_init_context(), AbstractContextManager[None])
    with precision.forward_context():
        pass
    assert_type(precision.optimizer_step(torch.optim.SGD(module.parameters())), bool)
    assert_type(precision.state_dict(), dict[str, Any])


# -- negative -------------------------------------------------------------------------------


class StringFlag(_PrecisionCore):
    @property
    def flag(self) -> str:
        return "32-true"

    def convert_input(self, data: _T) -> _T:
        return data


class UnknownFlag(_PrecisionCore):
    @property
    def flag(self) -> Literal["32-true", "fp8"]:
        return "fp8"

    def convert_input(self, data: _T) -> _T:
        return data


class NonGenericConvertInput(_PrecisionCore):
    @property
    def flag(self) -> PrecisionFlag:
        return "32-true"

    def convert_input(self, data: object) -> object:
        return data


class MissingConvertInput(_PrecisionCore):
    @property
    def flag(self) -> PrecisionFlag:
        return "32-true"


class ExplicitMissingFlag(Precision):
    @property
    def param_dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def compute_dtype(self) -> torch.dtype:
        return torch.float32

    def setup(self, device: torch.device) -> None:
        pass

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def convert_input(self, data: _T) -> _T:
        return data

    def module_init_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        pass

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        return True

    def state_dict(self) -> StateDict:
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        pass


string_flag: Precision = StringFlag()  # type: ignore[assignment]
unknown_flag: Precision = UnknownFlag()  # type: ignore[assignment]
not_generic: Precision = NonGenericConvertInput()  # type: ignore[assignment]
missing: Precision = MissingConvertInput()  # type: ignore[assignment]
abstract = ExplicitMissingFlag()  # type: ignore[abstract]
fp16: PrecisionFlag = "fp16"  # type: ignore[assignment]


def misuse_precision(precision: Precision, module: torch.nn.Module) -> None:
    precision.flag = "64-true"  # type: ignore[misc]
    step_taken: str = precision.optimizer_step(torch.optim.SGD(module.parameters()))  # type: ignore[assignment]
    precision.backward(1.0, module)  # type: ignore[arg-type]
