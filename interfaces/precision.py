"""The Precision protocol: dtypes, autocast, gradient scaling.

The contract, lifecycle first, is the docstring of :class:`Precision`
(``help(trainspec.Precision)``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager

    import torch

    from trainspec.types import PrecisionFlag, StateDict

__all__ = ["Precision"]

_T = TypeVar("_T")


@runtime_checkable
class Precision(Protocol):
    """Numeric format of training for one flag.

    Lifecycle (on every rank, driven by the strategy)::

        1) setup(device)                        -- validates the flag on that device
        2) module_init_context() while building a module (optional for the trainer)
           convert_module(module)               -- once per module, before wrapping
        3) per step:  forward_context() around the forward pass
                      convert_input(batch)
                      backward(loss)
                      unscale_gradients(optimizer)   -- optional, e.g. before clipping
                      optimizer_step(optimizer)
        4) state_dict() / load_state_dict() around checkpoints
        5) teardown()                           -- then 1) may run again

    A Precision owns everything that depends on the numeric format: converting a module and its
    inputs, the contexts under which modules are built and run, the backward pass and the optimizer
    step (scaling, unscaling, skipping non-finite steps), and its own state (a loss scale).

    Flag semantics (PREC-1): parameter dtype / compute dtype::

        ==============  ===============  ================================
        flag            parameters       compute (inside forward_context)
        ==============  ===============  ================================
        ``32-true``     float32          float32
        ``64-true``     float64          float64
        ``16-true``     float16          float16
        ``bf16-true``   bfloat16         bfloat16
        ``16-mixed``    float32          float16 under autocast, scaled
        ``bf16-mixed``  float32          bfloat16 under autocast
        ==============  ===============  ================================

    Clauses PREC-1 ... PREC-12 in docs/spec.md.
    """

    @property
    @abstractmethod
    def flag(self) -> PrecisionFlag:
        """The precision flag this instance implements; constant (PREC-1)."""

    @property
    @abstractmethod
    def param_dtype(self) -> torch.dtype:
        """The dtype of floating-point parameters after :meth:`convert_module` (PREC-1)."""

    @property
    @abstractmethod
    def compute_dtype(self) -> torch.dtype:
        """The dtype of floating-point results of matmul-like ops in :meth:`forward_context`
        (PREC-1)."""

    @abstractmethod
    def setup(self, device: torch.device) -> None:
        """Bind to the device training runs on and validate the flag for it.

        **Must** raise :class:`~trainspec.UnsupportedError` when the flag cannot run on that
        device (for example float16 autocast or gradient scaling where the device has none),
        instead of warning and silently disabling itself as ``torch.autocast`` and
        ``GradScaler`` do (PREC-2). Calling it again with the same device is harmless.
        """

    @abstractmethod
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast ``module``'s floating-point parameters and buffers to :attr:`param_dtype`.

        **Must** leave non-floating-point tensors unchanged (PREC-3). May convert in place;
        the returned module is the one to use.
        """

    @abstractmethod
    def convert_input(self, data: _T) -> _T:
        """Cast floating-point tensors in ``data`` (nested lists, tuples, dicts) to the dtype
        the module expects; other values are returned unchanged, in the same structure (PREC-4).
        """

    @abstractmethod
    def module_init_context(self) -> AbstractContextManager[None]:
        """A context under which newly created floating-point parameters get
        :attr:`param_dtype`.

        On exit, normally or by an exception, the global default dtype **must** be what it was
        on entry (PREC-5).
        """

    @abstractmethod
    def forward_context(self) -> AbstractContextManager[None]:
        """A context for the forward pass that computes in :attr:`compute_dtype`.

        On exit, normally or by an exception, the default dtype and the autocast state of every
        device type **must** be what they were on entry (PREC-5, PREC-6).
        """

    @abstractmethod
    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """Run the backward pass from ``tensor`` (a scalar loss), scaling it first if this
        precision scales gradients (PREC-7)."""

    @abstractmethod
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring the gradients of ``optimizer``'s parameters to their true scale.

        **Must** be idempotent within one step: gradients are unscaled exactly once whether
        this is called zero, one or several times before :meth:`optimizer_step` (PREC-8).
        A no-op for precisions that do not scale.
        """

    @abstractmethod
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale (if not done this step), step ``optimizer`` and update the scale.

        Returns ``True`` if the parameters were updated. With gradient scaling, a step whose
        gradients contain inf or NaN **must** be skipped (parameters and optimizer state
        unchanged), return ``False`` and lower the scale (PREC-9). Without scaling, always
        steps and returns ``True`` (PREC-10).
        """

    @abstractmethod
    def state_dict(self) -> StateDict:
        """This precision's own state (for example the loss scale); may be empty.

        **Must** round-trip: ``load_state_dict(state_dict())`` on a fresh instance of the same
        flag restores an equal state (PREC-11).
        """

    @abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore state from :meth:`state_dict`. Malformed state **must** raise
        :class:`~trainspec.ConfigurationError` (PREC-11)."""

    @abstractmethod
    def teardown(self) -> None:
        """Release the device binding; idempotent. ``setup`` may be called again (PREC-12)."""
