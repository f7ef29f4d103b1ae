"""``*-true`` precisions: parameters and compute in one dtype, no scaling.

=================  ============  ==============================================
class              flag          dtype (parameters, inputs, default in contexts)
=================  ============  ==============================================
Float32Precision   ``32-true``   float32
Float64Precision   ``64-true``   float64
Float16Precision   ``16-true``   float16
BFloat16Precision  ``bf16-true`` bfloat16
=================  ============  ==============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import torch

from trainspec.reference.precisions.base import DtypePrecision, check_flag
from trainspec.reference.precisions.conversion import DefaultDtype
from trainspec.reference.precisions.support import check_dtype_support

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager
    from typing import Any

    from trainspec.types import PrecisionFlag, StateDict

__all__ = [
    "BFloat16Precision",
    "Float16Precision",
    "Float32Precision",
    "Float64Precision",
    "TruePrecision",
]

TRUE_DTYPES: Final[dict[PrecisionFlag, torch.dtype]] = {
    "32-true": torch.float32,
    "64-true": torch.float64,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}


class TruePrecision(DtypePrecision):
    """A ``*-true`` flag: everything in one dtype.

    ``forward_context`` and ``module_init_context`` set the default dtype and restore it on
    exit (PREC-5); ``backward`` is ``tensor.backward()``; ``unscale_gradients`` is a no-op;
    ``optimizer_step`` always steps and returns ``True`` (PREC-10); the state is ``{}``.
    ``setup`` checks that a matmul and its backward run in the dtype on the device (PREC-2).

    Args:
        flag: ``"32-true"``, ``"64-true"``, ``"16-true"`` or ``"bf16-true"``; anything else
            raises :class:`~trainspec.ConfigurationError` listing these.
    """

    def __init__(self, flag: str) -> None:
        checked = check_flag(flag, tuple(TRUE_DTYPES), "TruePrecision")
        dtype = TRUE_DTYPES[checked]
        super().__init__(checked, dtype, dtype)

    def validate_device(self, device: torch.device) -> None:
        """The dtype's matmul and backward must run on ``device`` (PREC-2)."""
        check_dtype_support(self._flag, device, self._param_dtype)

    def forward_context(self) -> AbstractContextManager[None]:
        """The default dtype is the flag's dtype inside, restored on exit (PREC-5, PREC-6)."""
        return DefaultDtype(self._compute_dtype)

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """``tensor.backward()`` (PREC-7: nothing to scale)."""
        tensor.backward()  # type: ignore[no-untyped-call]

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """No-op: gradients are never scaled (PREC-8)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer.step()``; always ``True`` (PREC-10)."""
        optimizer.step()
        return True

    def state_dict(self) -> StateDict:
        """``{}``: a true precision has no state (PREC-11)."""
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Accept ``{}``; anything else raises ConfigurationError (PREC-11)."""
        self._require_empty_state(self._flag, state_dict)


class Float32Precision(TruePrecision):
    """``"32-true"``: float32 parameters and compute."""

    def __init__(self) -> None:
        super().__init__("32-true")


class Float64Precision(TruePrecision):
    """``"64-true"``: float64 parameters and compute."""

    def __init__(self) -> None:
        super().__init__("64-true")


class Float16Precision(TruePrecision):
    """``"16-true"``: float16 parameters and compute (no loss scaling)."""

    def __init__(self) -> None:
        super().__init__("16-true")


class BFloat16Precision(TruePrecision):
    """``"bf16-true"``: bfloat16 parameters and compute."""

    def __init__(self) -> None:
        super().__init__("bf16-true")
