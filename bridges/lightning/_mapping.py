"""The translations both directions share: reduce ops, ``weights_only``, device requests, errors.

Every argument Lightning passes that trainspec spells differently is mapped here, once, and
every error a Lightning plugin raises is translated here, once (:data:`ERROR_TABLE`), so the
bridge classes only delegate.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

import torch

from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    DeviceUnavailableError,
    TrainspecError,
    UnsafeCheckpointError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from trainspec.types import ReduceOp

__all__ = [
    "ERROR_TABLE",
    "ErrorRule",
    "reduce_op_from_lightning",
    "translate_error",
    "translating",
    "unsupported",
    "weights_only_allowed",
]

_T = TypeVar("_T")

_REDUCE_OPS: Final[dict[str, ReduceOp]] = {
    "sum": "sum",
    "mean": "mean",
    "avg": "mean",
    "min": "min",
    "max": "max",
    "product": "product",
    "prod": "product",
}


def unsupported(owner: str, what: str, why: str) -> UnsupportedError:
    """The error for a Lightning argument or member that has no trainspec counterpart."""
    return UnsupportedError(f"{owner}: {what} has no trainspec counterpart; {why}")


def reduce_op_from_lightning(reduce_op: object, owner: str) -> ReduceOp:
    """Lightning's ``reduce_op`` (``None``, a string, or a ``torch.distributed.ReduceOp``) as
    a trainspec :data:`~trainspec.ReduceOp`.

    ``None`` is a sum, as in Lightning's ``_sync_ddp``; ``"mean"`` and ``"avg"`` are the mean;
    strings are case-insensitive. Anything else raises :class:`~trainspec.ConfigurationError`
    naming the valid choices.
    """
    if reduce_op is None:
        return "sum"
    name: str | None = None
    if isinstance(reduce_op, str):
        name = reduce_op.lower()
    elif torch.distributed.is_available():
        members = {
            torch.distributed.ReduceOp.SUM: "sum",
            torch.distributed.ReduceOp.AVG: "avg",
            torch.distributed.ReduceOp.MIN: "min",
            torch.distributed.ReduceOp.MAX: "max",
            torch.distributed.ReduceOp.PRODUCT: "product",
        }
        for member, member_name in members.items():
            if reduce_op == member:
                name = member_name
                break
    if name is None or name not in _REDUCE_OPS:
        raise ConfigurationError(
            f"{owner}: reduce_op {reduce_op!r} is not supported; valid: None (sum), "
            f"{', '.join(repr(k) for k in _REDUCE_OPS)} or torch.distributed.ReduceOp "
            "SUM/AVG/MIN/MAX/PRODUCT"
        )
    return _REDUCE_OPS[name]


def weights_only_allowed(checkpoint_io: object, weights_only: object, owner: str) -> None:
    """Map Lightning's ``weights_only`` on a load to trainspec's load policy (CKPT-8).

    A trainspec CheckpointIO is safe by default and trusts pickled content only when it was
    *constructed* to (the policy belongs to the instance, not to a call):

    - ``None``: the IO's own policy;
    - ``False``: a permission, not a request; the IO's policy still decides, and content that
      needs code execution raises :class:`~trainspec.UnsafeCheckpointError` from an IO not
      constructed to trust it;
    - ``True``: allowed unless the IO says it trusts pickled content (a ``weights_only``
      attribute that is ``False``), which a call cannot narrow:
      :class:`~trainspec.UnsupportedError`.

    Anything but ``None`` or a bool raises :class:`~trainspec.ConfigurationError`.
    """
    if weights_only is None or weights_only is False:
        return
    if weights_only is not True:
        raise ConfigurationError(
            f"{owner}: weights_only must be None, True or False; got {weights_only!r}"
        )
    if getattr(checkpoint_io, "weights_only", True) is False:
        raise UnsupportedError(
            f"{owner}: load_checkpoint(weights_only=True) on {checkpoint_io!r}, which was "
            "constructed to trust pickled content; a trainspec CheckpointIO's load policy is "
            "fixed at construction. Use an instance constructed with its safe default."
        )


def map_location_from_lightning(map_location: object, owner: str) -> object:
    """Lightning's ``map_location`` as a trainspec :data:`~trainspec.MapLocation`.

    ``None``, a string, a ``torch.device`` and a ``{str: str}`` mapping pass through; a
    callable (Lightning's ``TorchCheckpointIO`` default ``lambda storage, loc: storage``
    means "where saved", which is trainspec's ``None``) is only accepted as that identity;
    any other callable raises :class:`~trainspec.UnsupportedError`.
    """
    if map_location is None or isinstance(map_location, (str, torch.device, dict)):
        return map_location
    if callable(map_location):
        probe = object()
        try:
            same = map_location(probe, "cpu") is probe
        except Exception:
            same = False
        if same:
            return None
        raise unsupported(
            owner,
            "a callable map_location",
            "pass None, a device string, a torch.device or a {'from': 'to'} dict",
        )
    raise ConfigurationError(
        f"{owner}: map_location must be None, a device string, a torch.device or a dict; "
        f"got {type(map_location).__name__}"
    )


# -- Lightning -> trainspec errors -------------------------------------------------------------


@dataclass(frozen=True)
class ErrorRule:
    """One row of :data:`ERROR_TABLE`: in ``stage``, an exception of ``source`` becomes
    ``target`` (the original is kept as ``__cause__``)."""

    stage: str
    source: type[BaseException]
    target: type[TrainspecError | TypeError]


def _lightning_misconfiguration() -> type[BaseException]:
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    return MisconfigurationException


ERROR_TABLE: Final[tuple[ErrorRule, ...]] = (
    # device requests and device setup (Accelerator)
    ErrorRule("devices", _lightning_misconfiguration(), ConfigurationError),
    ErrorRule("devices", TypeError, ConfigurationError),
    ErrorRule("devices", ValueError, ConfigurationError),
    ErrorRule("devices", RuntimeError, DeviceUnavailableError),
    # configuration of any plugin
    ErrorRule("config", _lightning_misconfiguration(), ConfigurationError),
    ErrorRule("config", ValueError, ConfigurationError),
    ErrorRule("config", TypeError, ConfigurationError),
    ErrorRule("config", KeyError, ConfigurationError),
    # checkpoint reads
    ErrorRule("read", FileNotFoundError, CheckpointNotFoundError),
    ErrorRule("read", NotADirectoryError, CheckpointNotFoundError),
    ErrorRule("read", IsADirectoryError, CheckpointCorruptedError),
    ErrorRule("read", pickle.UnpicklingError, CheckpointCorruptedError),
    ErrorRule("read", EOFError, CheckpointCorruptedError),
    ErrorRule("read", RuntimeError, CheckpointCorruptedError),
    ErrorRule("read", ValueError, CheckpointCorruptedError),
    ErrorRule("read", OSError, CheckpointCorruptedError),
    # module / optimizer state (torch raises RuntimeError for missing or unexpected keys)
    ErrorRule("state", RuntimeError, ConfigurationError),
    ErrorRule("state", KeyError, ConfigurationError),
    ErrorRule("state", ValueError, ConfigurationError),
    # collectives
    ErrorRule("collective", ValueError, ConfigurationError),
    ErrorRule("collective", TimeoutError, CollectiveTimeoutError),
    ErrorRule("collective", RuntimeError, CollectiveError),
    # checkpoint writes and removals
    ErrorRule("write", TypeError, TypeError),
    ErrorRule("write", OSError, CheckpointWriteError),
    ErrorRule("remove", OSError, CheckpointWriteError),
)
"""Lightning-side exceptions and the trainspec error each becomes, tried in order. An
exception that matches no row propagates unchanged (a bug is not disguised as a verdict);
trainspec errors always pass through. ``torch.load``'s refusal of non-allowlisted globals
(an ``UnpicklingError`` naming an ``Unsupported global``) is
:class:`~trainspec.UnsafeCheckpointError`, checked before the table."""


def _is_weights_only_refusal(error: BaseException) -> bool:
    # torch's weights-only unpickler names the refused global; other refusals (random bytes,
    # a truncated file) are corruption.
    return isinstance(error, pickle.UnpicklingError) and "Unsupported global" in str(error)


def translate_error(error: BaseException, stage: str, context: str) -> BaseException:
    """``error`` (raised by a Lightning plugin in ``stage``) as a trainspec error, or
    ``error`` itself when it already is one or no row of :data:`ERROR_TABLE` matches."""
    if isinstance(error, TrainspecError):
        return error
    if stage == "read" and _is_weights_only_refusal(error):
        return UnsafeCheckpointError(
            f"{context}: the checkpoint needs code execution to load ({error}); load it only "
            "from a trusted source, with a Lightning plugin that passes weights_only=False"
        )
    for rule in ERROR_TABLE:
        if rule.stage == stage and isinstance(error, rule.source):
            if rule.target is TypeError and isinstance(error, TypeError):
                return error
            return rule.target(f"{context}: {type(error).__name__}: {error}")
    return error


def translating(stage: str, context: str, call: Callable[[], _T]) -> _T:
    """``call()``, with any exception translated by :func:`translate_error`."""
    try:
        return call()
    except Exception as error:
        translated = translate_error(error, stage, context)
        if translated is error:
            raise
        raise translated from error


def device_request_to_lightning(devices: object) -> object:
    """A trainspec device request in the shape Lightning's ``parse_devices`` accepts (the
    same shapes: ``int``, ``str``, ``list[int]``); sequences become lists."""
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return list(devices)
    return devices
