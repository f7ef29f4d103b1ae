"""What every reference precision shares: its flag and dtypes, conversion, the device binding.

:class:`DtypePrecision` implements the dtype half of :class:`trainspec.Precision`
(``convert_module``, ``convert_input``, ``module_init_context``) and the ``setup`` /
``teardown`` binding to one device, validated once by :meth:`DtypePrecision.validate_device`.
Subclasses add the contexts and the step: :class:`~trainspec.reference.precisions.TruePrecision`
and :class:`~trainspec.reference.precisions.MixedPrecision`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import torch

from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.precision import Precision
from trainspec.reference._messages import describe_value
from trainspec.reference.precisions.conversion import (
    DefaultDtype,
    cast_floating_tensors,
    cast_module,
)
from trainspec.reference.precisions.support import check_device_reachable
from trainspec.types import PRECISION_FLAGS

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from trainspec.types import PrecisionFlag

__all__ = ["DtypePrecision", "check_flag"]

_T = TypeVar("_T")


class DtypePrecision(Precision):
    """Base of the reference precisions: a flag, its two dtypes and an optional device.

    Lifecycle: ``setup(device)`` validates the flag on ``device`` once (PREC-2) and binds it;
    ``setup`` again with the same device is a no-op, with another device it raises
    :class:`~trainspec.LifecycleError` until ``teardown()`` (idempotent, PREC-12) unbinds.
    Conversion and ``module_init_context`` work without ``setup``.
    """

    def __init__(
        self, flag: PrecisionFlag, param_dtype: torch.dtype, compute_dtype: torch.dtype
    ) -> None:
        self._flag: PrecisionFlag = flag
        self._param_dtype = param_dtype
        self._compute_dtype = compute_dtype
        self._device: torch.device | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(flag={self._flag!r})"

    @property
    def flag(self) -> PrecisionFlag:
        """The flag given at construction (PREC-1)."""
        return self._flag

    @property
    def param_dtype(self) -> torch.dtype:
        """Floating-point parameter dtype after :meth:`convert_module` (PREC-1)."""
        return self._param_dtype

    @property
    def compute_dtype(self) -> torch.dtype:
        """Dtype of matmul results inside :meth:`forward_context` (PREC-1)."""
        return self._compute_dtype

    @property
    def device(self) -> torch.device | None:
        """The device bound by :meth:`setup`, ``None`` before it and after teardown."""
        return self._device

    @abstractmethod
    def validate_device(self, device: torch.device) -> None:
        """Raise :class:`~trainspec.UnsupportedError` unless this flag runs on ``device``.

        Called by :meth:`setup` once per binding, never per step. ``device`` is known to hold
        tensors.
        """

    def setup(self, device: torch.device) -> None:
        """Validate the flag on ``device`` and bind to it (PREC-2).

        Raises:
            ConfigurationError: ``device`` is not a ``torch.device``.
            DeviceUnavailableError: no tensor can be placed on ``device``.
            UnsupportedError: the flag does not run on ``device``.
            LifecycleError: already set up for another device.
        """
        if not isinstance(device, torch.device):
            raise ConfigurationError(
                f"setup expects a torch.device, got {describe_value(device)} "
                f"({type(device).__name__})"
            )
        if self._device is not None:
            if device == self._device:
                return
            raise LifecycleError(
                f"{self!r} is set up for {self._device}; call teardown() before setup({device})"
            )
        self.validate_device(check_device_reachable(device))
        self._device = device

    def teardown(self) -> None:
        """Unbind the device; idempotent, and ``setup`` may run again (PREC-12)."""
        self._device = None

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast floating-point parameters and buffers to :attr:`param_dtype` in place
        (PREC-3); non-floating-point tensors are untouched."""
        return cast_module(module, self._param_dtype)

    def convert_input(self, data: _T) -> _T:
        """Cast floating-point tensors in ``data`` to :attr:`param_dtype`, keeping the
        structure (PREC-4); see :func:`~trainspec.reference.precisions.conversion.
        cast_floating_tensors`."""
        return cast_floating_tensors(data, self._param_dtype)

    def module_init_context(self) -> AbstractContextManager[None]:
        """The default dtype is :attr:`param_dtype` inside, restored on exit (PREC-5)."""
        return DefaultDtype(self._param_dtype)

    @staticmethod
    def _require_empty_state(flag: str, state_dict: Mapping[str, object]) -> None:
        """Load the state of a precision that has none: only an empty mapping is valid."""
        if not isinstance(state_dict, Mapping) or len(state_dict) != 0:
            raise ConfigurationError(
                f"precision {flag!r} has no state; load_state_dict expects {{}} (what its "
                f"state_dict() returns), got {describe_value(state_dict)}"
            )


def check_flag(flag: object, allowed: tuple[PrecisionFlag, ...], kind: str) -> PrecisionFlag:
    """``flag`` as a :data:`~trainspec.PrecisionFlag` if it is one of ``allowed``."""
    if isinstance(flag, str):  # '==' with a numpy array gives an array: compare strings only
        for known in allowed:
            if flag == known:
                return known
    other = [f for f in PRECISION_FLAGS if f not in allowed]
    raise ConfigurationError(
        f"{kind} does not implement precision flag {describe_value(flag)}; valid: "
        f"{', '.join(allowed)} "
        f"(other flags: {', '.join(other)}; see precision_for_flag)"
    )
