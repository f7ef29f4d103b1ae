"""``*-mixed`` precisions: float32 parameters, half-precision compute under autocast.

=======================  ==============  ==========================================
class                    flag            compute (under ``torch.autocast``)
=======================  ==============  ==========================================
Float16MixedPrecision    ``16-mixed``    float16, with dynamic loss scaling
BFloat16MixedPrecision   ``bf16-mixed``  bfloat16, no scaling (bfloat16 has float32's range)
=======================  ==============  ==========================================
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar, Final

import torch

from trainspec.errors import LifecycleError
from trainspec.reference.precisions.base import DtypePrecision, check_flag
from trainspec.reference.precisions.conversion import DefaultDtype
from trainspec.reference.precisions.loss_scaler import (
    DEFAULT_SCALER_STATE,
    LossScaler,
    ScalerState,
)
from trainspec.reference.precisions.support import (
    check_autocast_support,
    check_grad_scaler_support,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import TracebackType
    from typing import Any

    from trainspec.types import PrecisionFlag, StateDict

__all__ = ["BFloat16MixedPrecision", "Float16MixedPrecision", "MixedPrecision"]

MIXED_DTYPES: Final[dict[PrecisionFlag, torch.dtype]] = {
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
}


class MixedPrecision(DtypePrecision):
    """A ``*-mixed`` flag: float32 parameters, autocast compute in the half dtype.

    * ``setup(device)`` checks that ``torch.autocast(device.type, dtype)`` really computes in
      the half dtype there and, for ``"16-mixed"``, that ``GradScaler`` works there; it raises
      :class:`~trainspec.UnsupportedError` instead of torch's warn-and-disable (PREC-2).
    * ``forward_context()`` is ``torch.autocast(device.type, dtype)``, which restores the
      autocast state on exit (PREC-6). It needs ``setup`` first (the device type).
    * ``"16-mixed"`` scales the loss in ``backward`` (PREC-7), unscales once per step
      (PREC-8), skips non-finite steps and lowers the scale (PREC-9); its state is the
      :class:`~trainspec.reference.precisions.loss_scaler.ScalerState` fields (PREC-11),
      kept across ``teardown``/``setup`` and loadable before ``setup``. ``backward``,
      ``unscale_gradients`` and ``optimizer_step`` need ``setup`` first.
    * ``"bf16-mixed"`` has no scaling: its step always steps (PREC-10); its state is ``{}``.

    Args:
        flag: ``"16-mixed"`` or ``"bf16-mixed"``; anything else raises
            :class:`~trainspec.ConfigurationError` listing these.
    """

    def __init__(self, flag: str) -> None:
        checked = check_flag(flag, tuple(MIXED_DTYPES), "MixedPrecision")
        super().__init__(checked, torch.float32, MIXED_DTYPES[checked])
        self._scales = checked == "16-mixed"
        self._scaler_state = DEFAULT_SCALER_STATE  # authoritative while no scaler exists
        self._scaler: LossScaler | None = None
        self._device_type: str | None = None

    def validate_device(self, device: torch.device) -> None:
        """Autocast to the half dtype, and for ``16-mixed`` gradient scaling, must work on
        ``device`` (PREC-2)."""
        check_autocast_support(self._flag, device, self._compute_dtype)
        if self._scales:
            check_grad_scaler_support(self._flag, device)

    def setup(self, device: torch.device) -> None:
        """Validate and bind ``device``; ``16-mixed`` creates its loss scaler here."""
        super().setup(device)
        self._device_type = device.type
        if self._scales and self._scaler is None:
            self._scaler = LossScaler(device.type, self._scaler_state)

    def teardown(self) -> None:
        """Unbind; the loss-scale state is kept for the next ``setup`` (PREC-12)."""
        if self._scaler is not None:
            self._scaler_state = self._scaler.state()
            self._scaler = None
        self._device_type = None
        super().teardown()

    def module_init_context(self) -> AbstractContextManager[None]:
        """The default dtype is float32 inside, restored on exit (PREC-5)."""
        return DefaultDtype(torch.float32)

    def forward_context(self) -> AbstractContextManager[None]:
        """``torch.autocast(device.type, dtype=compute_dtype)`` (PREC-6)."""
        if self._device_type is None:
            raise self._not_set_up("forward_context")
        return _Autocast(torch.autocast(self._device_type, dtype=self._compute_dtype))

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """``backward`` of the loss, scaled first for ``16-mixed`` (PREC-7)."""
        if self._scales:
            scaler = self._scaler
            if scaler is None:
                raise self._not_set_up("backward")
            scaler.scale(tensor).backward()  # type: ignore[no-untyped-call]
        else:
            tensor.backward()  # type: ignore[no-untyped-call]

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale ``optimizer``'s gradients once per step (PREC-8); no-op for bf16."""
        if self._scales:
            scaler = self._scaler
            if scaler is None:
                raise self._not_set_up("unscale_gradients")
            scaler.unscale(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step; for ``16-mixed`` skip non-finite gradients, update the scale, and return
        whether the parameters were updated (PREC-9, PREC-10)."""
        if not self._scales:
            optimizer.step()
            return True
        scaler = self._scaler
        if scaler is None:
            raise self._not_set_up("optimizer_step")
        return scaler.step(optimizer)

    def state_dict(self) -> StateDict:
        """``16-mixed``: ``scale``, ``growth_factor``, ``backoff_factor``,
        ``growth_interval``, ``growth_tracker`` (Python numbers); ``bf16-mixed``: ``{}``."""
        if not self._scales:
            return {}
        state = self._scaler.state() if self._scaler is not None else self._scaler_state
        return dict(state.as_dict())

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; malformed state raises ConfigurationError
        naming the key and its valid range (PREC-11)."""
        if not self._scales:
            self._require_empty_state(self._flag, state_dict)
            return
        state = ScalerState.from_mapping(state_dict)
        if self._scaler is not None:
            self._scaler.load(state)
        else:
            self._scaler_state = state

    def _not_set_up(self, method: str) -> LifecycleError:
        return LifecycleError(
            f"{self!r}.{method}() needs the device type: call setup(device) first"
        )


class _Autocast(AbstractContextManager[None]):
    """``torch.autocast`` binding ``None`` to ``as`` (torch's binds itself), as the protocol's
    ``AbstractContextManager[None]`` says."""

    __slots__ = ("_autocast",)

    def __init__(self, autocast: torch.autocast) -> None:
        self._autocast = autocast

    def __enter__(self) -> None:
        self._autocast.__enter__()  # type: ignore[no-untyped-call]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._autocast.__exit__(exc_type, exc, traceback)


class Float16MixedPrecision(MixedPrecision):
    """``"16-mixed"``: float32 parameters, float16 autocast, dynamic loss scaling."""

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"autocast", "gradient_scaling"})
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""

    def __init__(self) -> None:
        super().__init__("16-mixed")


class BFloat16MixedPrecision(MixedPrecision):
    """``"bf16-mixed"``: float32 parameters, bfloat16 autocast."""

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"autocast"})
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""

    def __init__(self) -> None:
        super().__init__("bf16-mixed")
