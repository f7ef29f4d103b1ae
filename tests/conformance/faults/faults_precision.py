"""Fault-seeded precisions: each subclasses a reference precision and breaks exactly one rule;
``clause`` names the clause and ``rejected_by`` the check that must reject it; ``capabilities``
is what the fault declares (what its baseline declares)."""

from __future__ import annotations

import contextlib
import warnings
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.reference.precisions import (
    BFloat16MixedPrecision,
    Float16MixedPrecision,
    Float16Precision,
    Float32Precision,
    Float64Precision,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

_T = TypeVar("_T")

SCALING: frozenset[str] = frozenset({"gradient_scaling", "autocast"})
AUTOCAST: frozenset[str] = frozenset({"autocast"})
NONE: frozenset[str] = frozenset()

REFERENCE_CAPABILITIES: dict[str, frozenset[str]] = {
    "Float32Precision": NONE,
    "Float64Precision": NONE,
    "Float16Precision": NONE,
    "BFloat16Precision": NONE,
    "Float16MixedPrecision": SCALING,
    "BFloat16MixedPrecision": AUTOCAST,
}
"""What each reference precision declares."""


class _Fault:
    clause: ClassVar[str]
    rejected_by: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = NONE


def _finite(optimizer: torch.optim.Optimizer) -> bool:
    return all(
        bool(torch.isfinite(p.grad).all())
        for group in optimizer.param_groups
        for p in group["params"]
        if p.grad is not None
    )


# --------------------------------------------------------------------------- PREC-1


class NoCastFloat16Precision(_Fault, Float16Precision):
    """convert_module returns the module without casting it to float16."""

    clause = "PREC-3"
    rejected_by = "check_precision_convert_module_casts_parameters_to_param_dtype"

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module


class WrongComputeDtypeFloat16Precision(_Fault, Float16Precision):
    """compute_dtype reports float32 for "16-true"."""

    clause = "PREC-1"
    rejected_by = "check_precision_flag_and_dtypes_match_the_flag_table"

    @property
    def compute_dtype(self) -> torch.dtype:
        return torch.float32


class Float16AutocastBFloat16MixedPrecision(_Fault, BFloat16MixedPrecision):
    """forward_context autocasts to float16 although the flag is "bf16-mixed"."""

    clause = "PREC-1"
    rejected_by = "check_precision_forward_context_computes_in_compute_dtype"
    capabilities = AUTOCAST

    def forward_context(self) -> AbstractContextManager[None]:
        device = self.device
        if device is None:
            raise LifecycleError("setup first")
        return torch.autocast(device.type, dtype=torch.float16)  # type: ignore[return-value]


class PlainInitFloat64Precision(_Fault, Float64Precision):
    """module_init_context does nothing: new modules get float32 parameters."""

    clause = "PREC-5"
    rejected_by = "check_precision_module_init_context_creates_parameters_in_param_dtype"

    def module_init_context(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()


# --------------------------------------------------------------------------- PREC-2


class AcceptsMetaFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """setup(meta) pretends meta is the CPU instead of raising UnsupportedError."""

    clause = "PREC-2"
    rejected_by = "check_precision_setup_refuses_devices_it_cannot_compute_on"
    capabilities = SCALING

    def setup(self, device: torch.device) -> None:
        super().setup(torch.device("cpu") if device.type == "meta" else device)


class WarningBFloat16MixedPrecision(_Fault, BFloat16MixedPrecision):
    """setup warns that autocast may be disabled instead of deciding."""

    clause = "PREC-2"
    rejected_by = "check_precision_raises_instead_of_silently_disabling"
    capabilities = AUTOCAST

    def setup(self, device: torch.device) -> None:
        warnings.warn("autocast may be disabled on this device", UserWarning, stacklevel=2)
        super().setup(device)


# --------------------------------------------------------------------------- PREC-3, PREC-4


class CastsBuffersFloat16Precision(_Fault, Float16Precision):
    """convert_module casts every buffer, integer and bool ones included."""

    clause = "PREC-3"
    rejected_by = "check_precision_convert_module_leaves_non_float_tensors_unchanged"

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        module = super().convert_module(module)
        for sub in module.modules():
            for name, buffer in list(sub.named_buffers(recurse=False)):
                sub.register_buffer(name, buffer.to(self.param_dtype))
        return module


def _convert(data: object, dtype: torch.dtype, *, ints: bool, tuples_as_lists: bool) -> object:
    if isinstance(data, torch.Tensor):
        return data.to(dtype) if data.is_floating_point() or ints else data
    if isinstance(data, dict):
        return {
            k: _convert(v, dtype, ints=ints, tuples_as_lists=tuples_as_lists)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        items = [_convert(v, dtype, ints=ints, tuples_as_lists=tuples_as_lists) for v in data]
        return items if tuples_as_lists or isinstance(data, list) else tuple(items)
    return data


class TuplesAsListsFloat32Precision(_Fault, Float32Precision):
    """convert_input rebuilds tuples as lists."""

    clause = "PREC-4"
    rejected_by = "check_precision_convert_input_casts_only_floating_tensors"

    def convert_input(self, data: _T) -> _T:
        return _convert(data, self.param_dtype, ints=False, tuples_as_lists=True)  # type: ignore[return-value]


class CastsIntegersFloat64Precision(_Fault, Float64Precision):
    """convert_input casts integer and bool tensors to float64 too."""

    clause = "PREC-4"
    rejected_by = "check_precision_convert_input_casts_only_floating_tensors"

    def convert_input(self, data: _T) -> _T:
        return _convert(data, self.param_dtype, ints=True, tuples_as_lists=False)  # type: ignore[return-value]


# --------------------------------------------------------------------------- PREC-5, PREC-6


class LeakyInitFloat64Precision(_Fault, Float64Precision):
    """module_init_context restores the default dtype only on a normal exit."""

    clause = "PREC-5"
    rejected_by = "check_precision_module_init_context_restores_default_dtype"

    @contextlib.contextmanager
    def module_init_context(self) -> Iterator[None]:  # type: ignore[override]
        saved = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        yield
        torch.set_default_dtype(saved)


class ResetsToFloat32Float16Precision(_Fault, Float16Precision):
    """forward_context "restores" the default dtype to float32, not to what it was."""

    clause = "PREC-5"
    rejected_by = "check_precision_forward_context_restores_default_dtype"

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:  # type: ignore[override]
        torch.set_default_dtype(torch.float16)
        try:
            yield
        finally:
            torch.set_default_dtype(torch.float32)


class LeakyAutocastBFloat16MixedPrecision(_Fault, BFloat16MixedPrecision):
    """forward_context switches autocast on by hand and off only on a normal exit."""

    clause = "PREC-6"
    rejected_by = "check_precision_forward_context_restores_autocast_state"
    capabilities = AUTOCAST

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:  # type: ignore[override]
        device = self.device
        if device is None:
            raise LifecycleError("setup first")
        kind = device.type
        enabled, dtype = torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
        torch.set_autocast_enabled(kind, True)
        torch.set_autocast_dtype(kind, self.compute_dtype)
        yield
        torch.set_autocast_enabled(kind, enabled)
        torch.set_autocast_dtype(kind, dtype)


# --------------------------------------------------------------------------- PREC-7 ... PREC-10


def _scale(precision: Float16MixedPrecision) -> float:
    return float(precision.state_dict()["scale"])


class UnscaledLossFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """backward does not scale the loss, but the step still divides by the scale."""

    clause = "PREC-7"
    rejected_by = "check_precision_backward_produces_true_gradients_after_unscaling"
    capabilities = SCALING

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        super().backward(tensor / _scale(self), module)


class NeverUnscalesFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """Gradients are never unscaled: the optimizer steps with the scaled gradients."""

    clause = "PREC-8"
    rejected_by = "check_precision_unscales_exactly_once_per_step"
    capabilities = SCALING

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        return None

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        if not _finite(optimizer):
            return False
        optimizer.step()
        return True


class UnscalesTwiceFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """unscale_gradients divides by the scale on every call, and the step unscales again."""

    clause = "PREC-8"
    rejected_by = "check_precision_unscales_exactly_once_per_step"
    capabilities = SCALING

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        scale = _scale(self)
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.div_(scale)


class StepsOnInfFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """A step the scaler skipped is taken anyway."""

    clause = "PREC-9"
    rejected_by = "check_precision_skips_steps_with_non_finite_gradients"
    capabilities = SCALING

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        if not super().optimizer_step(optimizer):
            optimizer.step()
        return True


class FixedScaleFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """Skips non-finite steps but never lowers the loss scale."""

    clause = "PREC-9"
    rejected_by = "check_precision_skips_steps_with_non_finite_gradients"
    capabilities = SCALING

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        before = self.state_dict()
        stepped = super().optimizer_step(optimizer)
        if not stepped:
            self.load_state_dict(before)
        return stepped


class StepReturnsNoneFloat32Precision(_Fault, Float32Precision):
    """optimizer_step steps but returns None."""

    clause = "PREC-10"
    rejected_by = "check_precision_optimizer_step_returns_true_when_it_steps"

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        optimizer.step()
        return None  # type: ignore[return-value]


class SkipsInfWithoutScalingFloat32Precision(_Fault, Float32Precision):
    """Without gradient scaling, skips steps with non-finite gradients."""

    clause = "PREC-10"
    rejected_by = "check_precision_without_scaling_always_steps"

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        if not _finite(optimizer):
            return False
        return super().optimizer_step(optimizer)


# --------------------------------------------------------------------------- PREC-11, PREC-12


class IgnoresLoadedStateFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """load_state_dict validates the state but does not apply it."""

    clause = "PREC-11"
    rejected_by = "check_precision_state_dict_round_trips"
    capabilities = SCALING

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        Float16MixedPrecision().load_state_dict(state_dict)


class AcceptsGarbageStateFloat16MixedPrecision(_Fault, Float16MixedPrecision):
    """load_state_dict ignores values it cannot use instead of raising."""

    clause = "PREC-11"
    rejected_by = "check_precision_load_state_dict_rejects_malformed_state"
    capabilities = SCALING

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        with contextlib.suppress(ConfigurationError):
            super().load_state_dict(state_dict)


class TeardownOnceFloat32Precision(_Fault, Float32Precision):
    """A second teardown raises LifecycleError."""

    clause = "PREC-12"
    rejected_by = "check_precision_teardown_is_idempotent_and_allows_setup_again"

    def teardown(self) -> None:
        if self.device is None:
            raise LifecycleError("not set up")
        super().teardown()


FAULTS: tuple[type[_Fault], ...] = (
    NoCastFloat16Precision,
    WrongComputeDtypeFloat16Precision,
    Float16AutocastBFloat16MixedPrecision,
    PlainInitFloat64Precision,
    AcceptsMetaFloat16MixedPrecision,
    WarningBFloat16MixedPrecision,
    CastsBuffersFloat16Precision,
    TuplesAsListsFloat32Precision,
    CastsIntegersFloat64Precision,
    LeakyInitFloat64Precision,
    ResetsToFloat32Float16Precision,
    LeakyAutocastBFloat16MixedPrecision,
    UnscaledLossFloat16MixedPrecision,
    NeverUnscalesFloat16MixedPrecision,
    UnscalesTwiceFloat16MixedPrecision,
    StepsOnInfFloat16MixedPrecision,
    FixedScaleFloat16MixedPrecision,
    StepReturnsNoneFloat32Precision,
    SkipsInfWithoutScalingFloat32Precision,
    IgnoresLoadedStateFloat16MixedPrecision,
    AcceptsGarbageStateFloat16MixedPrecision,
    TeardownOnceFloat32Precision,
)
"""Every fault-seeded precision; ``clause`` / ``rejected_by`` name what must reject it."""
