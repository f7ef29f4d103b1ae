"""Explicit support checks for a precision on a device (PREC-2).

``torch.autocast`` and ``torch.amp.GradScaler`` warn and silently disable themselves where a
device type or dtype is unsupported; these checks instead run a tiny computation with warnings
turned into errors and raise :class:`~trainspec.UnsupportedError` naming the flag and device.
They are called from ``Precision.setup``, never per step.
"""

from __future__ import annotations

import warnings

import torch

from trainspec.errors import ConfigurationError, DeviceUnavailableError, UnsupportedError
from trainspec.reference._messages import describe_value

__all__ = [
    "check_autocast_support",
    "check_device_reachable",
    "check_grad_scaler_support",
    "check_dtype_support",
]


def check_device_reachable(device: object) -> torch.device:
    """Return ``device`` if it is a ``torch.device`` on which a tensor can be created.

    Raises:
        ConfigurationError: ``device`` is not a ``torch.device``.
        DeviceUnavailableError: creating a tensor there fails (no driver, no such index).
    """
    if not isinstance(device, torch.device):
        raise ConfigurationError(
            f"setup expects a torch.device, got {describe_value(device)} ({type(device).__name__})"
        )
    try:
        torch.empty(1, device=device)
    except Exception as error:  # torch raises RuntimeError, AssertionError, ... per backend
        raise DeviceUnavailableError(
            f"cannot place a tensor on {device} in this process: {error}"
        ) from error
    return device


def check_dtype_support(flag: str, device: torch.device, dtype: torch.dtype) -> None:
    """Raise UnsupportedError unless a matmul and its backward run in ``dtype`` on ``device``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            leaf = torch.ones((2, 2), dtype=dtype, device=device, requires_grad=True)
            (leaf @ leaf).sum().backward()  # type: ignore[no-untyped-call]
            grad = leaf.grad
    except Exception as error:
        raise UnsupportedError(
            f"precision {flag!r} needs {dtype} matmul and backward on {device}, which fail "
            f"here: {error}"
        ) from error
    if grad is None or grad.dtype != dtype:
        raise UnsupportedError(
            f"precision {flag!r}: {dtype} gradients on {device} came back as "
            f"{None if grad is None else grad.dtype}"
        )


def check_autocast_support(flag: str, device: torch.device, dtype: torch.dtype) -> None:
    """Raise UnsupportedError unless ``torch.autocast(device.type, dtype)`` computes a matmul
    in ``dtype`` on ``device`` without warning."""
    if not torch.amp.is_autocast_available(device.type):
        raise UnsupportedError(
            f"precision {flag!r} needs autocast, which torch does not provide for device "
            f"type {device.type!r}; use a '*-true' flag there"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            operand = torch.ones((2, 2), device=device)
            with torch.autocast(device.type, dtype=dtype):
                result_dtype = (operand @ operand).dtype
    except Exception as error:
        raise UnsupportedError(
            f"precision {flag!r}: autocast to {dtype} on {device} is not supported here: {error}"
        ) from error
    if result_dtype != dtype:
        raise UnsupportedError(
            f"precision {flag!r}: under autocast({device.type!r}, {dtype}) a matmul computes "
            f"in {result_dtype}, not {dtype}"
        )


def check_grad_scaler_support(flag: str, device: torch.device) -> None:
    """Raise UnsupportedError unless ``torch.amp.GradScaler(device.type)`` is enabled and can
    scale, unscale, step and update on ``device`` without warning."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            scaler = torch.amp.GradScaler(device.type)
            if not scaler.is_enabled():
                raise RuntimeError("GradScaler disabled itself")
            weight = torch.nn.Parameter(torch.ones(2, device=device))
            optimizer = torch.optim.SGD([weight], lr=0.0)
            scaler.scale(weight.sum()).backward()  # type: ignore[no-untyped-call]
            scaler.step(optimizer)
            scaler.update()
    except Exception as error:
        raise UnsupportedError(
            f"precision {flag!r} needs gradient scaling (torch.amp.GradScaler) on "
            f"{device.type!r}, which is not supported here: {error}; use 'bf16-mixed' or a "
            "'*-true' flag there"
        ) from error
