"""Device requests and device arguments: the validation every reference accelerator shares.

:func:`parse_device_request` is a pure function of ``(request, available, device_type)``: it
touches no device, so it is tested without the hardware and reused by every accelerator
(ACC-4, ACC-5, ACC-6). :func:`check_device` validates the ``device`` argument of
``setup_device``, ``synchronize`` and ``get_device_stats`` (ACC-7).

Accepted requests::

    2, "2"          the first two devices          -> [0, 1]
    -1, "-1"        every device                   -> [0, ..., available - 1]
    "auto"          ``auto_count`` devices (all unless the accelerator says otherwise)
    "0,1", "1,"     an index list (a trailing comma marks a one-element list)
    [1, 0], (2,)    an index list, in the order given

Errors: a malformed request (zero, a negative count other than ``-1``, a bool, a float, an
empty or duplicated index list, a negative index, an unknown string, any other type) raises
:class:`~trainspec.ConfigurationError`; a well-formed request for devices that do not exist
here (too many, an index out of range, any request when there are none) raises
:class:`~trainspec.DeviceUnavailableError`. Both messages name the valid range.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import torch

from trainspec.errors import ConfigurationError, DeviceUnavailableError
from trainspec.reference._messages import MAX_DIGITS, describe_value, parse_ascii_int

__all__ = ["check_device", "describe_valid_requests", "parse_device_request"]

_DIGITS: Final = re.compile(r"[0-9]+")


def describe_valid_requests(available: int) -> str:
    """The valid requests for ``available`` devices, as a message fragment."""
    if available <= 0:
        return "none, because no device of this type exists here"
    if available == 1:
        return "1, -1, 'auto', or index 0"
    return f"1..{available}, -1, 'auto', or indices 0..{available - 1}"


def parse_device_request(
    devices: object,
    *,
    device_type: str,
    available: int,
    auto_count: int | None = None,
) -> list[int]:
    """Turn ``devices`` into a list of distinct device indices, in the order requested.

    ``available`` is how many devices of ``device_type`` exist (indices ``0..available-1``);
    ``auto_count`` is what ``"auto"`` means (``None``: every device). The function **must
    not** touch any device. The result is non-empty, duplicate-free and in range.

    Raises:
        ConfigurationError: ``devices`` is malformed (see the module docstring).
        DeviceUnavailableError: ``devices`` is well formed but asks for devices that do not
            exist (more than ``available``, an index ``>= available``).
    """
    request = _normalise(devices, device_type, available)
    if isinstance(request, list):
        out_of_range = [i for i in request if i >= available]
        if out_of_range:
            raise DeviceUnavailableError(
                f"devices={describe_value(devices)} asks for {device_type} device index "
                f"{describe_value(out_of_range[0])} but {available} exist; valid: "
                f"{describe_valid_requests(available)}"
            )
        return request
    if request == "all" or (request == "auto" and auto_count is None):
        count, wanted = available, f"every {device_type} device"
    else:
        chosen = auto_count if request == "auto" else request
        assert isinstance(chosen, int)
        plural = "s" if chosen != 1 else ""
        count, wanted = chosen, f"{describe_value(chosen)} {device_type} device{plural}"
    if available <= 0 or count > available:
        raise DeviceUnavailableError(
            f"devices={describe_value(devices)} asks for {wanted} but {max(available, 0)} "
            f"exist; valid: {describe_valid_requests(available)}"
        )
    return list(range(count))


def _normalise(devices: object, device_type: str, available: int) -> int | str | list[int]:
    """A positive count, ``"all"``, ``"auto"`` or an index list; malformed input raises."""
    if isinstance(devices, bool):
        raise _malformed(devices, device_type, available, "a bool is not a device count")
    if isinstance(devices, int):
        if devices == -1:
            return "all"
        if devices <= 0:
            raise _malformed(devices, device_type, available, "a count must be positive or -1")
        return devices
    if isinstance(devices, str):
        return _normalise_string(devices, device_type, available)
    if isinstance(devices, Sequence) and not isinstance(devices, (bytes, bytearray)):
        return _indices(list(devices), devices, device_type, available)
    raise _malformed(
        devices, device_type, available, f"type {type(devices).__name__} is not accepted"
    )


def _normalise_string(devices: str, device_type: str, available: int) -> int | str | list[int]:
    text = devices.strip()
    if text.lower() == "auto":
        return "auto"
    if text == "-1":
        return "all"
    if "," in text:
        parts = [part.strip() for part in text.split(",")]
        if parts[-1] == "":  # "1," is the one-element index list [1]
            parts.pop()
        if not parts or not all(_DIGITS.fullmatch(part) for part in parts):
            raise _malformed(
                devices, device_type, available, "an index list holds non-negative integers"
            )
        return _indices(
            [_digits(part, devices, device_type, available) for part in parts],
            devices,
            device_type,
            available,
        )
    if _DIGITS.fullmatch(text):
        count = _digits(text, devices, device_type, available)
        if count == 0:
            raise _malformed(devices, device_type, available, "a count must be positive or -1")
        return count
    raise _malformed(devices, device_type, available, "not a count, index list or 'auto'")


def _digits(text: str, devices: object, device_type: str, available: int) -> int:
    """The value of ASCII digits ``text``; more than :data:`MAX_DIGITS` significant digits
    ask for more devices than exist anywhere (and ``int()`` of over 4300 digits raises)."""
    value = parse_ascii_int(text)
    if value is None:
        raise DeviceUnavailableError(
            f"devices={describe_value(devices)} asks for a {device_type} device count or "
            f"index of more than {MAX_DIGITS} digits but {max(available, 0)} exist; valid: "
            f"{describe_valid_requests(available)}"
        )
    return value


def _indices(items: list[object], devices: object, device_type: str, available: int) -> list[int]:
    if not items:
        raise _malformed(devices, device_type, available, "an index list must not be empty")
    indices: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise _malformed(
                devices, device_type, available, f"index {describe_value(item)} is not an int"
            )
        if item < 0:
            raise _malformed(
                devices, device_type, available, f"index {describe_value(item)} is negative"
            )
        if item in indices:
            raise _malformed(
                devices, device_type, available, f"index {describe_value(item)} is repeated"
            )
        indices.append(item)
    return indices


def _malformed(devices: object, device_type: str, available: int, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"devices={describe_value(devices)} is not a valid {device_type} device request "
        f"({why}); valid: "
        f"{describe_valid_requests(available)}"
    )


def check_device(device: object, device_type: str, available: int | None = None) -> int | None:
    """Validate a ``device`` argument for an accelerator of ``device_type``; return its index.

    **Must** raise :class:`~trainspec.ConfigurationError` when ``device`` is not a
    ``torch.device`` or is of another type (ACC-7), and
    :class:`~trainspec.DeviceUnavailableError` when ``available`` is given and the device's
    index (``None`` counts as 0) is not below it.
    """
    if not isinstance(device, torch.device):
        raise ConfigurationError(
            f"expected a torch.device of type {device_type!r}, got {describe_value(device)} "
            f"({type(device).__name__})"
        )
    if device.type != device_type:
        raise ConfigurationError(
            f"this accelerator manages {device_type!r} devices; got {device} of type "
            f"{device.type!r}"
        )
    index = device.index
    if available is not None and (index or 0) >= available:
        raise DeviceUnavailableError(
            f"{device} does not exist here: {max(available, 0)} {device_type} device(s) "
            f"available; valid indices: " + (f"0..{available - 1}" if available > 0 else "none")
        )
    return index
