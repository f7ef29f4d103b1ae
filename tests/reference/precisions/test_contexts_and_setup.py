"""PREC-2, PREC-5, PREC-6, PREC-12: contexts restore state; unsupported pairs raise; lifecycle."""

from __future__ import annotations

import warnings

import pytest
import torch

from trainspec import (
    PRECISION_FLAGS,
    ConfigurationError,
    DeviceUnavailableError,
    LifecycleError,
    UnsupportedError,
)
from trainspec.reference.precisions import (
    BFloat16MixedPrecision,
    Float16MixedPrecision,
    Float64Precision,
    precision_for_flag,
)

CPU = torch.device("cpu")
MIXED = ["16-mixed", "bf16-mixed"]


def autocast_state(device_type: str = "cpu") -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_forward_context_restores_dtype_and_autocast_when_the_body_raises(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.setup(CPU)
    outer = (torch.get_default_dtype(), autocast_state())
    with pytest.raises(RuntimeError, match="boom"), precision.forward_context():
        result = torch.ones(2, 2) @ torch.ones(2, 2)
        assert result.dtype == precision.compute_dtype
        raise RuntimeError("boom")
    assert (torch.get_default_dtype(), autocast_state()) == outer


@pytest.mark.parametrize("flag", MIXED)
def test_forward_context_restores_an_enclosing_autocast_state(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.setup(CPU)
    other = torch.float16 if flag == "bf16-mixed" else torch.bfloat16
    with torch.autocast("cpu", dtype=other, enabled=False):
        enclosing = autocast_state()
        with pytest.raises(ValueError), precision.forward_context():
            assert autocast_state() == (True, precision.compute_dtype)
            raise ValueError
        assert autocast_state() == enclosing


@pytest.mark.parametrize("flag", ["32-true", "64-true", "16-true", "bf16-true"])
def test_true_forward_context_sets_the_default_dtype(flag: str) -> None:
    precision = precision_for_flag(flag)
    with precision.forward_context():
        assert torch.get_default_dtype() == precision.compute_dtype
        assert torch.zeros(1).dtype == precision.compute_dtype
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("flag", MIXED)
def test_autocast_unavailable_for_the_device_type_is_unsupported(flag: str) -> None:
    with pytest.raises(UnsupportedError):
        precision_for_flag(flag).setup(torch.device("meta"))


@pytest.mark.parametrize("flag", MIXED)
def test_autocast_that_torch_would_disable_is_unsupported(
    flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device_type: False)
    with pytest.raises(UnsupportedError):
        precision_for_flag(flag).setup(CPU)


def test_autocast_that_warns_and_computes_in_float32_is_unsupported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_autocast = torch.autocast

    def disabling_autocast(device_type: str, dtype: torch.dtype) -> torch.autocast:
        warnings.warn(
            "target dtype is not supported. Disabling autocast.", UserWarning, stacklevel=2
        )
        return real_autocast(device_type, dtype=dtype, enabled=False)

    monkeypatch.setattr(torch, "autocast", disabling_autocast)
    with pytest.raises(UnsupportedError):
        BFloat16MixedPrecision().setup(CPU)


def test_a_grad_scaler_that_disables_itself_is_unsupported_for_16_mixed_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_scaler = torch.amp.GradScaler

    def disabled_scaler(device: str = "cuda", **kwargs: object) -> torch.amp.GradScaler:
        warnings.warn(
            "GradScaler is enabled, but the device is not available. Disabling.", stacklevel=2
        )
        return real_scaler(device, enabled=False)

    monkeypatch.setattr(torch.amp, "GradScaler", disabled_scaler)
    with pytest.raises(UnsupportedError):
        Float16MixedPrecision().setup(CPU)
    BFloat16MixedPrecision().setup(CPU)


def test_a_dtype_the_device_cannot_compute_in_is_unsupported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_ones = torch.ones

    def ones(*size: int, dtype: torch.dtype | None = None, **kwargs: object) -> torch.Tensor:
        if dtype == torch.float64:
            raise TypeError("Cannot convert a tensor to float64 dtype: not supported")
        return real_ones(*size, dtype=dtype, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(torch, "ones", ones)
    with pytest.raises(UnsupportedError, match="64-true"):
        Float64Precision().setup(CPU)
    precision_for_flag("32-true").setup(CPU)


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_setup_on_a_device_that_does_not_exist_raises_device_unavailable(flag: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(DeviceUnavailableError):
        precision_for_flag(flag).setup(torch.device("cuda"))


def test_setup_needs_a_torch_device() -> None:
    precision = precision_for_flag("32-true")
    with pytest.raises(ConfigurationError):
        precision.setup("cpu")  # type: ignore[arg-type]
    precision.setup(CPU)
    with pytest.raises(ConfigurationError):
        precision.setup("cpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_contexts_bind_none(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.setup(CPU)
    with precision.forward_context() as value:
        assert value is None
    with precision.module_init_context() as value:
        assert value is None


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_setup_is_repeatable_and_teardown_idempotent(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.teardown()  # before setup: harmless
    precision.setup(CPU)
    precision.setup(CPU)
    with pytest.raises(LifecycleError):
        precision.setup(torch.device("meta"))
    precision.teardown()
    precision.teardown()
    precision.setup(CPU)
    with precision.forward_context():
        pass


@pytest.mark.parametrize("flag", MIXED)
def test_mixed_forward_context_needs_setup(flag: str) -> None:
    precision = precision_for_flag(flag)
    with pytest.raises(LifecycleError):
        precision.forward_context()
    precision.setup(CPU)
    precision.teardown()
    with pytest.raises(LifecycleError):
        precision.forward_context()


def test_16_mixed_scaling_needs_setup() -> None:
    precision = Float16MixedPrecision()
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    with pytest.raises(LifecycleError):
        precision.backward(weight.sum(), None)
    with pytest.raises(LifecycleError):
        precision.unscale_gradients(optimizer)
    with pytest.raises(LifecycleError):
        precision.optimizer_step(optimizer)


@pytest.mark.gpu
@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_every_flag_trains_a_step_on_cuda(flag: str) -> None:
    device = torch.device("cuda", 0)
    precision = precision_for_flag(flag)
    try:
        precision.setup(device)
    except UnsupportedError as error:  # e.g. bf16 on a GPU without it: must say so
        pytest.skip(str(error))
    module = precision.convert_module(torch.nn.Linear(8, 2).to(device))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    with precision.forward_context():
        output = module(precision.convert_input(torch.randn(4, 8, device=device)))
    assert output.dtype == precision.compute_dtype
    precision.backward(output.float().pow(2).mean(), module)
    precision.unscale_gradients(optimizer)
    precision.optimizer_step(optimizer)
    assert {p.dtype for p in module.parameters()} == {precision.param_dtype}
    precision.teardown()
