"""ACC-7 ... ACC-10: a device of another type is refused, setup and teardown are idempotent and
repeatable, synchronize waits for queued work, and device statistics are finite numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.accelerator import Accelerator
    from trainspec.conformance.checks.accelerator._fixtures import _Target


def _other_device(accelerator: Accelerator) -> torch.device:
    """A device of a type the accelerator does not manage (``meta``, or ``cpu`` for meta)."""
    return torch.device("cpu") if accelerator.device_type == "meta" else torch.device("meta")


def _first_device(target: _Target, accelerator: Accelerator) -> torch.device:
    """The accelerator's first device; skips the check when none is available here."""
    try:
        available = accelerator.is_available()
        count = accelerator.device_count()
    except Exception as exc:
        raise CheckSkipped(
            f"is_available()/device_count() raised {describe_exception(exc)} (see ACC-2, ACC-3)"
        ) from exc
    if not available or count < 1:
        raise CheckSkipped(f"no {accelerator.device_type} device is available on this machine")
    try:
        devices = accelerator.parse_devices(1)
    except Exception as exc:
        raise failure(
            target,
            "ACC-4",
            expected="parse devices=1 when a device is available",
            actual=describe_exception(exc),
            snippet=snippet(target, "acc.parse_devices(1)", var="acc"),
        ) from exc
    if len(devices) != 1 or not isinstance(devices[0], torch.device):
        raise failure(
            target,
            "ACC-4",
            expected="parse devices=1 into a list of one torch.device",
            actual=describe_value(devices),
            snippet=snippet(target, "acc.parse_devices(1)", var="acc"),
        )
    return devices[0]


# --------------------------------------------------------------------------- ACC-7


@check("ACC-7", "accelerator")
def check_accelerator_setup_device_refuses_another_device_type(target: _Target) -> None:
    """setup_device() with a device of another type raises ConfigurationError."""
    acc = target.make()
    other = _other_device(acc)
    expect_raises(
        target,
        "ACC-7",
        ConfigurationError,
        lambda: acc.setup_device(other),
        expected=f"raise ConfigurationError from setup_device({other!r})",
        hint=f"Compare device.type with {acc.device_type!r} first.",
        snippet=snippet(target, f"acc.setup_device(torch.device({other.type!r}))", var="acc"),
    )


@check("ACC-7", "accelerator")
def check_accelerator_setup_device_refuses_a_missing_index(target: _Target) -> None:
    """setup_device() with an index that does not exist raises DeviceUnavailableError."""
    acc = target.make()
    _first_device(target, acc)
    missing = torch.device(acc.device_type, acc.device_count())
    expect_raises(
        target,
        "ACC-7",
        DeviceUnavailableError,
        lambda: acc.setup_device(missing),
        expected=f"raise DeviceUnavailableError from setup_device({missing!r}) "
        f"(device_count()={acc.device_count()})",
        hint="Check the index against device_count() before selecting the device.",
        snippet=snippet(
            target,
            f"acc.setup_device(torch.device({acc.device_type!r}, acc.device_count()))",
            var="acc",
        ),
    )


# --------------------------------------------------------------------------- ACC-8


@check("ACC-8", "accelerator")
def check_accelerator_teardown_is_safe_without_setup(target: _Target) -> None:
    """teardown() before any setup_device(), and twice in a row, does not raise."""
    acc = target.make()
    repro = snippet(target, "acc.teardown()\nacc.teardown()", var="acc")
    for attempt in ("first", "second"):
        try:
            acc.teardown()
        except Exception as exc:
            raise failure(
                target,
                "ACC-8",
                expected="accept teardown() without a prior setup_device(), any number of times",
                actual=f"the {attempt} teardown() raised {describe_exception(exc)}",
                hint="Make teardown a no-op when nothing was set up.",
                snippet=repro,
            ) from exc


@check("ACC-8", "accelerator")
def check_accelerator_setup_and_teardown_are_idempotent_and_repeatable(target: _Target) -> None:
    """setup_device twice, teardown twice, then setup_device again all work.

    A tensor is placed on the device after each setup_device.
    """
    acc = target.make()
    device = _first_device(target, acc)

    def place() -> None:
        torch.ones(2, device=device).add_(1)

    # Only the members ACC-8 governs (and tensor placement, which any device supports) are
    # called: synchronize is ACC-9's, so an accelerator that lacks it fails that clause alone.
    steps: list[tuple[str, Callable[[], object]]] = [
        ("setup_device(device)", lambda: acc.setup_device(device)),
        ("a tensor placed on the device after setup_device", place),
        ("setup_device(device) again", lambda: acc.setup_device(device)),
        ("a tensor placed on the device after the second setup_device", place),
        ("teardown()", acc.teardown),
        ("teardown() again", acc.teardown),
        ("setup_device(device) after teardown", lambda: acc.setup_device(device)),
        ("a tensor placed on the device after setup_device again", place),
        ("teardown() at the end", acc.teardown),
    ]
    repro = snippet(
        target,
        f"""
        device = acc.parse_devices(1)[0]  # {device!r}
        acc.setup_device(device); torch.ones(2, device=device)
        acc.setup_device(device); torch.ones(2, device=device)
        acc.teardown(); acc.teardown()
        acc.setup_device(device); torch.ones(2, device=device); acc.teardown()
        """,
        var="acc",
    )
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            raise failure(
                target,
                "ACC-8",
                expected="allow repeated setup_device, repeated teardown and setup again "
                "after teardown",
                actual=f"{name} raised {describe_exception(exc)}",
                hint="Track what setup acquired; make both calls idempotent and reset the "
                "state in teardown.",
                snippet=repro,
            ) from exc


# --------------------------------------------------------------------------- ACC-9


def _current_stream(device: torch.device) -> object | None:
    """The device's current stream where its type has streams with ``query()`` (cuda, xpu,
    mps-like modules of torch), else None."""
    module = getattr(torch, device.type, None)
    current_stream = getattr(module, "current_stream", None)
    if not callable(current_stream):
        return None
    try:
        stream = current_stream(device)
    except Exception:
        return None
    return stream if callable(getattr(stream, "query", None)) else None


def _queue_work(device: torch.device) -> None:
    """Queue a few large matrix products on ``device`` (asynchronous on streamed devices)."""
    x = torch.ones((2048, 2048), device=device) / 2048
    for _ in range(16):
        x = x @ x


@check("ACC-9", "accelerator")
def check_accelerator_synchronize_waits_for_queued_work(target: _Target) -> None:
    """synchronize() returns None after the work queued on its device has completed.

    On a device type with streams, work is queued on the current stream and the stream must
    report it complete right after synchronize() returns; on others, synchronize() of a set-up
    device returns None.
    """
    acc = target.make()
    device = _first_device(target, acc)
    repro = snippet(
        target,
        "d = acc.parse_devices(1)[0]\nacc.setup_device(d)\n"
        "x = torch.ones((2048, 2048), device=d)\nfor _ in range(16):\n    x = x @ x\n"
        "acc.synchronize(d)\nprint(getattr(torch, d.type).current_stream(d).query())  # True",
        var="acc",
    )
    pending = False
    try:
        acc.setup_device(device)
        stream = _current_stream(device)
        if stream is not None:
            _queue_work(device)
        result: object = acc.synchronize(device)
        if stream is not None:
            pending = not stream.query()  # type: ignore[attr-defined]
    except Exception as exc:
        raise failure(
            target,
            "ACC-9",
            expected=f"synchronize its own device {device!r}",
            actual=describe_exception(exc),
            snippet=repro,
        ) from exc
    finally:
        acc.teardown()
    if result is not None:
        raise failure(
            target,
            "ACC-9",
            expected="return None from synchronize()",
            actual=describe_value(result),
            snippet=repro,
        )
    if pending:
        raise failure(
            target,
            "ACC-9",
            expected=f"return from synchronize({device!r}) only after the work queued on it "
            "has completed",
            actual="the device's current stream still had work pending",
            hint=f"Call torch.{device.type}.synchronize(device) (or wait on the stream).",
            snippet=repro,
        )


@check("ACC-7", "accelerator")
def check_accelerator_synchronize_refuses_another_device_type(target: _Target) -> None:
    """synchronize() with a device of another type raises ConfigurationError."""
    acc = target.make()
    other = _other_device(acc)
    expect_raises(
        target,
        "ACC-7",
        ConfigurationError,
        lambda: acc.synchronize(other),
        expected=f"raise ConfigurationError from synchronize({other!r})",
        hint=f"Compare device.type with {acc.device_type!r} even when synchronize is a no-op.",
        snippet=snippet(target, f"acc.synchronize(torch.device({other.type!r}))", var="acc"),
    )


# --------------------------------------------------------------------------- ACC-10


@check("ACC-10", "accelerator")
def check_accelerator_device_stats_are_finite_numbers(target: _Target) -> None:
    """get_device_stats() returns a dict of str keys to finite float (or int) values."""
    acc = target.make()
    device = _first_device(target, acc)
    repro = snippet(
        target,
        "d = acc.parse_devices(1)[0]\nacc.setup_device(d)\nprint(acc.get_device_stats(d))",
        var="acc",
    )
    try:
        acc.setup_device(device)
        stats = acc.get_device_stats(device)
    except Exception as exc:
        raise failure(
            target,
            "ACC-10",
            expected=f"return statistics for its own device {device!r}",
            actual=describe_exception(exc),
            snippet=repro,
        ) from exc
    finally:
        acc.teardown()
    if not isinstance(stats, dict):
        raise failure(
            target,
            "ACC-10",
            expected="return a dict from get_device_stats()",
            actual=describe_value(stats),
            snippet=repro,
        )
    bad = {
        key: value
        for key, value in stats.items()
        if not isinstance(key, str)
        or isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    }
    if bad:
        raise failure(
            target,
            "ACC-10",
            expected="map str keys to finite numbers in get_device_stats()",
            actual=f"offending entries {describe_value(bad, limit=200)}",
            hint="Convert tensors to float, drop unknown values instead of reporting NaN.",
            snippet=repro,
        )


@check("ACC-7", "accelerator")
def check_accelerator_device_stats_refuse_another_device_type(target: _Target) -> None:
    """get_device_stats() with a device of another type raises ConfigurationError."""
    acc = target.make()
    other = _other_device(acc)
    expect_raises(
        target,
        "ACC-7",
        ConfigurationError,
        lambda: acc.get_device_stats(other),
        expected=f"raise ConfigurationError from get_device_stats({other!r})",
        hint=f"Compare device.type with {acc.device_type!r} first.",
        snippet=snippet(target, f"acc.get_device_stats(torch.device({other.type!r}))", var="acc"),
    )
