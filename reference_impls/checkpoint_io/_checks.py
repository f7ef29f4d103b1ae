"""Argument checks shared by the checkpoint IOs: the checkpoint itself and ``map_location``.

A map location is checked *before* any bytes are read, so that a bad device request is
reported as such (``ConfigurationError``, ``DeviceUnavailableError``) instead of surfacing
from inside the decoder, where it would look like a damaged file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from trainspec.errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    from trainspec.types import MapLocation

__all__ = ["apply_map_location", "check_checkpoint", "check_map_location"]

_ALLOWED = (
    "None (keep the saved devices), a device string such as 'cpu' or 'cuda:0', a torch.device, "
    "or a mapping from saved device strings to target device strings"
)


def check_checkpoint(checkpoint: object, owner: str) -> None:
    """Raise ``TypeError`` unless ``checkpoint`` is a dict with string keys."""
    if not isinstance(checkpoint, dict):
        raise TypeError(
            f"{owner} saves a checkpoint dict (str keys); got {type(checkpoint).__name__}"
        )
    bad = [key for key in checkpoint if not isinstance(key, str)]
    if bad:
        raise TypeError(f"{owner} checkpoint keys must be str; got {bad[:5]!r}")


def _parse(value: object, role: str) -> torch.device:
    if isinstance(value, torch.device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"map_location {role} must be a str or torch.device; got {value!r}")
    try:
        return torch.device(value)
    except RuntimeError as exc:
        raise ConfigurationError(
            f"map_location {role} {value!r} is not a device; expected e.g. 'cpu' or 'cuda:0'"
        ) from exc


def _check_available(device: torch.device) -> None:
    if device.type in ("cpu", "meta"):
        return
    module = getattr(torch, device.type, None)
    is_available = getattr(module, "is_available", None)
    if callable(is_available) and not is_available():
        raise DeviceUnavailableError(
            f"map_location asks for {device}, but no {device.type} device is available here; "
            "load with map_location='cpu' instead"
        )
    device_count = getattr(module, "device_count", None)
    if device.index is not None and callable(device_count):
        count = device_count()
        if isinstance(count, int) and device.index >= count:
            raise DeviceUnavailableError(
                f"map_location asks for {device}, but only indices 0..{count - 1} exist"
            )


def check_map_location(map_location: MapLocation) -> None:
    """Raise unless ``map_location`` names devices that exist here.

    ``TypeError`` for a value of the wrong type, ``ConfigurationError`` for a string that is not
    a device, ``DeviceUnavailableError`` for a device this machine does not have.
    """
    if map_location is None:
        return
    if isinstance(map_location, (str, torch.device)):
        _check_available(_parse(map_location, "device"))
        return
    if isinstance(map_location, Mapping):
        for source, target in map_location.items():
            _parse(source, "key")
            _check_available(_parse(target, "value"))
        return
    raise TypeError(f"map_location must be {_ALLOWED}; got {map_location!r}")


def apply_map_location(tensor: torch.Tensor, map_location: MapLocation) -> torch.Tensor:
    """Move ``tensor`` as ``torch.load`` would for the already checked ``map_location``."""
    if map_location is None:
        return tensor
    if isinstance(map_location, (str, torch.device)):
        return tensor.to(torch.device(map_location))
    target = map_location.get(str(tensor.device))
    return tensor if target is None else tensor.to(torch.device(target))
