"""Behaviour checks for :class:`trainspec.Accelerator` (clauses ACC-1 ... ACC-10).

Every check makes its own instance with ``target.make()``. Checks that need a device take the
first device of ``parse_devices(1)`` and skip when the accelerator is not available here; the
checks of ``is_available``, ``device_count`` and the parser run everywhere.

Options read from ``target.options``:

``max_examples`` (int, default 20)
    Hypothesis examples per property check (device requests).

Devices without an index (``torch.device("cpu")``) stand for process slots of a device type
that has a single ``torch.device``: a parser may return that device repeatedly (``devices=2``
on the CPU is two processes on ``cpu``). Devices with an index must be distinct.
"""

from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING, Final

import torch

from trainspec.accelerator import Accelerator
from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    int_option,
    run_examples,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.conformance.strategies import MALFORMED_REQUESTS, DeviceRequestCase, device_requests
from trainspec.errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CAPABILITIES"]

CAPABILITIES: Final[dict[str, str]] = {}
"""The accelerator kind has no optional behaviour: every clause applies to every accelerator.
What a machine lacks (no device of the type) is detected at run time and skipped there."""

_Target = Target[Accelerator]


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


# --------------------------------------------------------------------------- ACC-1


@check("ACC-1", "accelerator")
def check_accelerator_device_type_is_a_constant_torch_device_type(target: _Target) -> None:
    """device_type is a string torch.device accepts, the same on every access and after use."""
    acc = target.make()
    repro = snippet(target, "torch.device(acc.device_type)", var="acc")
    first = acc.device_type
    if not isinstance(first, str):
        raise failure(
            target,
            "ACC-1",
            expected="return a str from device_type",
            actual=describe_value(first),
            snippet=repro,
        )
    try:
        torch.device(first)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise failure(
            target,
            "ACC-1",
            expected="name a device type that torch.device(device_type) accepts",
            actual=f"device_type={first!r}, torch.device raised {describe_exception(exc)}",
            hint="Use torch's spelling, e.g. 'cuda', 'xla', 'privateuseone' renamed by the "
            "vendor's rename_privateuse1_backend().",
            snippet=repro,
        ) from exc
    seen = [acc.device_type for _ in range(3)]
    acc.is_available()
    acc.device_count()
    acc.teardown()
    seen.append(acc.device_type)
    if any(value != first for value in seen):
        raise failure(
            target,
            "ACC-1",
            expected="return the same device_type for the life of the instance",
            actual=f"successive values {[first, *seen]!r}",
            snippet=repro,
        )


# --------------------------------------------------------------------------- ACC-2


def _global_state() -> dict[str, object]:
    """Process-wide state that availability queries must leave alone."""
    state: dict[str, object] = {
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.get_default_device()": torch.get_default_device(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.is_autocast_enabled('cpu')": torch.is_autocast_enabled("cpu"),
        "torch.random.get_rng_state()": bytes(torch.random.get_rng_state().tolist()),
        "os.environ": dict(os.environ),
        "live threads": frozenset(threading.enumerate()),
    }
    for name in ("cuda", "xpu", "mtia"):
        module = getattr(torch, name, None)
        is_initialized = getattr(module, "is_initialized", None)
        if callable(is_initialized):
            state[f"torch.{name}.is_initialized()"] = is_initialized()
    return state


def _state_changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    changes: list[str] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, frozenset) and isinstance(new, frozenset):
            # Threads of other components may end meanwhile; only new ones are a side effect.
            started = sorted(t.name for t in new - old if t.is_alive())
            if started:
                changes.append(f"started threads {started}")
        elif isinstance(old, dict) and isinstance(new, dict):
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            changes.append(f"{key} changed at {changed!r}")
        elif key == "torch.random.get_rng_state()":
            changes.append("the global RNG state changed")
        else:
            changes.append(f"{key}: {describe_value(old)} -> {describe_value(new)}")
    return changes


@check("ACC-2", "accelerator")
def check_accelerator_is_available_never_raises_and_is_stable(target: _Target) -> None:
    """is_available() returns a bool without raising, and the same bool on every call."""
    acc = target.make()
    repro = snippet(target, "print([acc.is_available() for _ in range(3)])", var="acc")
    answers: list[object] = []
    for _ in range(3):
        try:
            answers.append(acc.is_available())
        except Exception as exc:
            raise failure(
                target,
                "ACC-2",
                expected="never raise from is_available()",
                actual=describe_exception(exc),
                hint="Catch the driver's or vendor package's errors and return False.",
                snippet=repro,
            ) from exc
    if any(type(answer) is not bool for answer in answers):
        raise failure(
            target,
            "ACC-2",
            expected="return a bool from is_available()",
            actual=f"{answers!r}",
            snippet=repro,
        )
    if len(set(answers)) != 1:
        raise failure(
            target,
            "ACC-2",
            expected="give the same answer on repeated is_available() calls",
            actual=f"{answers!r}",
            snippet=repro,
        )


def _assert_no_side_effects(
    target: _Target, clause: str, what: str, call: Callable[[Accelerator], object], repro: str
) -> None:
    acc = target.make()
    before = _global_state()
    try:
        call(acc)
    except Exception:
        pass  # raising is judged by the checks of the call itself; only state matters here
    changes = _state_changes(before, _global_state())
    if changes:
        raise failure(
            target,
            clause,
            expected=f"leave process-wide state unchanged in {what}",
            actual="; ".join(changes),
            hint="Query availability without initialising the device, starting threads, "
            "changing torch defaults or environment variables.",
            snippet=repro,
        )


@check("ACC-2", "accelerator")
def check_accelerator_is_available_has_no_side_effects(target: _Target) -> None:
    """is_available() initialises no device, starts no thread, changes no global state."""
    _assert_no_side_effects(
        target,
        "ACC-2",
        "is_available()",
        lambda acc: (acc.is_available(), acc.is_available()),
        snippet(
            target,
            """
            import os, threading
            before = (torch.get_default_dtype(), dict(os.environ), threading.active_count())
            acc.is_available()
            print(before == (torch.get_default_dtype(), dict(os.environ),
                             threading.active_count()))
            """,
            var="acc",
        ),
    )


# --------------------------------------------------------------------------- ACC-3


@check("ACC-3", "accelerator")
def check_accelerator_device_count_matches_availability(target: _Target) -> None:
    """device_count() is a non-negative int, positive exactly when is_available() is true."""
    acc = target.make()
    repro = snippet(target, "print(acc.is_available(), acc.device_count())", var="acc")
    try:
        counts = [acc.device_count(), acc.device_count()]
    except Exception as exc:
        raise failure(
            target,
            "ACC-3",
            expected="never raise from device_count()",
            actual=describe_exception(exc),
            hint="Return 0 when the device type is unavailable.",
            snippet=repro,
        ) from exc
    if any(type(c) is not int or c < 0 for c in counts):
        raise failure(
            target,
            "ACC-3",
            expected="return a non-negative int from device_count()",
            actual=f"{counts!r}",
            snippet=repro,
        )
    if counts[0] != counts[1]:
        raise failure(
            target,
            "ACC-3",
            expected="return the same device_count() on repeated calls",
            actual=f"{counts!r}",
            snippet=repro,
        )
    try:
        available = acc.is_available()
    except Exception as exc:
        raise CheckSkipped(f"is_available() raised {describe_exception(exc)} (see ACC-2)") from exc
    if (counts[0] > 0) != bool(available):
        raise failure(
            target,
            "ACC-3",
            expected="report device_count() > 0 exactly when is_available() is True",
            actual=f"is_available()={available!r}, device_count()={counts[0]}",
            snippet=repro,
        )


@check("ACC-3", "accelerator")
def check_accelerator_device_count_has_no_side_effects(target: _Target) -> None:
    """device_count() initialises no device, starts no thread, changes no global state."""
    _assert_no_side_effects(
        target,
        "ACC-3",
        "device_count()",
        lambda acc: acc.device_count(),
        snippet(target, "acc.device_count()  # then compare torch/global state", var="acc"),
    )


# --------------------------------------------------------------------------- ACC-4


def _validate_parse(
    target: _Target, acc: Accelerator, case: DeviceRequestCase, devices: object
) -> None:
    repro = snippet(target, f"print(acc.parse_devices({case.request!r}))", var="acc")

    def bad(expected: str) -> Exception:
        return failure(
            target,
            "ACC-4",
            expected=f"parse {case.label} {case.request!r} into {expected}",
            actual=describe_value(devices, limit=200),
            snippet=repro,
        )

    if not isinstance(devices, list) or not devices:
        raise bad("a non-empty list of torch.device")
    if not all(isinstance(d, torch.device) for d in devices):
        raise bad("a list of torch.device objects")
    device_type = acc.device_type
    if any(d.type != device_type for d in devices):
        raise bad(f"devices of type {device_type!r}")
    if case.count is not None and len(devices) != case.count:
        raise bad(f"exactly {case.count} device(s)")
    indexed = [d.index is not None for d in devices]
    if all(indexed):
        if len(set(devices)) != len(devices):
            raise bad("distinct devices")
        got = tuple(d.index for d in devices if d.index is not None)
        if case.indices is not None and got != case.indices:
            raise bad(f"the devices with indices {list(case.indices)}, in that order")
    elif any(indexed):
        raise bad("devices that either all carry an index or all carry none")
    elif len(set(devices)) != 1:
        raise bad("repeated slots of the single index-less device")


@check("ACC-4", "accelerator")
def check_accelerator_parses_every_accepted_request_form(target: _Target) -> None:
    """Every accepted request form parses into distinct devices of its type, in order."""
    acc = target.make()
    count = acc.device_count()
    if count < 1:
        raise CheckSkipped(f"no {acc.device_type} device here: no request can be valid")

    def parse(case: DeviceRequestCase) -> None:
        try:
            devices = acc.parse_devices(case.request)  # type: ignore[arg-type]
        except Exception as exc:
            raise failure(
                target,
                "ACC-4",
                expected=f"accept {case.label} {case.request!r} with {count} device(s) present",
                actual=describe_exception(exc),
                snippet=snippet(target, f"acc.parse_devices({case.request!r})", var="acc"),
            ) from exc
        _validate_parse(target, acc, case, devices)

    run_examples(
        device_requests(count, kinds=("valid",)),
        parse,
        max_examples=int_option(target, "max_examples", 20),
    )


@check("ACC-4", "accelerator")
def check_accelerator_parse_devices_has_no_side_effects(target: _Target) -> None:
    """parse_devices() initialises no device and changes no global state."""

    def parse_some(acc: Accelerator) -> None:
        for request in (1, -1, "auto", 0, "bogus"):
            try:
                acc.parse_devices(request)
            except Exception:
                pass

    _assert_no_side_effects(
        target,
        "ACC-4",
        "parse_devices()",
        parse_some,
        snippet(target, "acc.parse_devices(-1)  # then compare torch/global state", var="acc"),
    )


# --------------------------------------------------------------------------- ACC-5, ACC-6


@check("ACC-5", "accelerator")
def check_accelerator_rejects_malformed_requests(target: _Target) -> None:
    """Malformed device requests raise ConfigurationError.

    Malformed requests (0, bools, -2, duplicates, junk strings, other types) raise
    ConfigurationError.
    """
    acc = target.make()
    count = acc.device_count()
    # With no device at all, "this is unavailable" is as good an answer as "malformed".
    allowed: tuple[type[Exception], ...] = (
        (ConfigurationError,) if count > 0 else (ConfigurationError, DeviceUnavailableError)
    )

    def refuse(case: DeviceRequestCase) -> None:
        expect_raises(
            target,
            "ACC-5",
            allowed,
            lambda: acc.parse_devices(case.request),  # type: ignore[arg-type]
            expected=f"raise ConfigurationError for {case.label} devices={case.request!r}",
            hint="Validate the request's type and value before using it; name the valid "
            "range in the message.",
            snippet=snippet(target, f"acc.parse_devices({case.request!r})", var="acc"),
        )

    for request, label in MALFORMED_REQUESTS:
        refuse(DeviceRequestCase(request, "malformed", label))
    run_examples(
        device_requests(count, kinds=("malformed",)),
        refuse,
        max_examples=int_option(target, "max_examples", 20),
    )


@check("ACC-6", "accelerator")
def check_accelerator_rejects_requests_beyond_device_count(target: _Target) -> None:
    """Requests for more devices than exist raise an error.

    Asking for more devices, or a higher index, than exist raises DeviceUnavailableError or
    ConfigurationError.
    """
    acc = target.make()
    count = acc.device_count()

    def refuse(case: DeviceRequestCase) -> None:
        expect_raises(
            target,
            "ACC-6",
            (DeviceUnavailableError, ConfigurationError),
            lambda: acc.parse_devices(case.request),  # type: ignore[arg-type]
            expected=(
                f"raise DeviceUnavailableError for {case.label} devices={case.request!r} "
                f"with device_count()={count}"
            ),
            hint="Compare the request with device_count() and name the valid range.",
            snippet=snippet(target, f"acc.parse_devices({case.request!r})", var="acc"),
        )

    fixed: list[DeviceRequestCase] = [
        DeviceRequestCase(count + 1, "too_many", "one more device than exist"),
        DeviceRequestCase(str(count + 1), "too_many", "one more device than exist"),
        DeviceRequestCase([count], "too_many", "the first index that does not exist"),
        DeviceRequestCase(f"{count},", "too_many", "the first index that does not exist"),
    ]
    if count == 0:
        fixed += [
            DeviceRequestCase(-1, "too_many", "all devices when there are none"),
            DeviceRequestCase("auto", "too_many", "'auto' when there are none"),
        ]
    for case in fixed:
        refuse(case)
    run_examples(
        device_requests(count, kinds=("too_many",)),
        refuse,
        max_examples=int_option(target, "max_examples", 20),
    )


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
    """setup_device twice, teardown twice, then setup_device again all work."""
    acc = target.make()
    device = _first_device(target, acc)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("setup_device(device)", lambda: acc.setup_device(device)),
        ("setup_device(device) again", lambda: acc.setup_device(device)),
        ("synchronize(device)", lambda: acc.synchronize(device)),
        ("teardown()", acc.teardown),
        ("teardown() again", acc.teardown),
        ("setup_device(device) after teardown", lambda: acc.setup_device(device)),
        ("synchronize(device) after re-setup", lambda: acc.synchronize(device)),
        ("teardown() at the end", acc.teardown),
    ]
    repro = snippet(
        target,
        f"""
        device = acc.parse_devices(1)[0]  # {device!r}
        acc.setup_device(device); acc.setup_device(device); acc.synchronize(device)
        acc.teardown(); acc.teardown()
        acc.setup_device(device); acc.synchronize(device); acc.teardown()
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


@check("ACC-9", "accelerator")
def check_accelerator_synchronize_accepts_own_devices(target: _Target) -> None:
    """synchronize() on a set-up device of the accelerator's type returns None."""
    acc = target.make()
    device = _first_device(target, acc)
    repro = snippet(
        target, "d = acc.parse_devices(1)[0]\nacc.setup_device(d)\nacc.synchronize(d)", var="acc"
    )
    try:
        acc.setup_device(device)
        result: object = acc.synchronize(device)
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


@check("ACC-9", "accelerator")
def check_accelerator_synchronize_refuses_another_device_type(target: _Target) -> None:
    """synchronize() with a device of another type raises ConfigurationError."""
    acc = target.make()
    other = _other_device(acc)
    expect_raises(
        target,
        "ACC-9",
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


@check("ACC-10", "accelerator")
def check_accelerator_device_stats_refuse_another_device_type(target: _Target) -> None:
    """get_device_stats() with a device of another type raises ConfigurationError."""
    acc = target.make()
    other = _other_device(acc)
    expect_raises(
        target,
        "ACC-10",
        ConfigurationError,
        lambda: acc.get_device_stats(other),
        expected=f"raise ConfigurationError from get_device_stats({other!r})",
        hint=f"Compare device.type with {acc.device_type!r} first.",
        snippet=snippet(target, f"acc.get_device_stats(torch.device({other.type!r}))", var="acc"),
    )


@check("ERR-1", "accelerator")
def check_accelerator_errors_are_trainspec_errors_that_survive_pickling(target: _Target) -> None:
    """Errors for bad input are trainspec errors with a message, and survive pickling.

    A malformed device request raises a ``TrainspecError`` subclass with a non-empty message,
    and the error pickles and unpickles to the same type and message (errors cross process
    boundaries in launchers and the distributed harness). The kit checks types and the round
    trip, never message wording.
    """
    import pickle

    from trainspec.errors import TrainspecError

    acc = target.make()
    repro = snippet(
        target,
        "import pickle\ntry:\n    acc.parse_devices(0)\nexcept Exception as e:\n"
        "    print(type(e), pickle.loads(pickle.dumps(e)))",
        var="acc",
    )
    try:
        acc.parse_devices(0)
    except TrainspecError as error:
        raised: TrainspecError = error
    except Exception as error:
        raise failure(
            target,
            "ERR-1",
            expected="raise a trainspec.TrainspecError subclass for the bad request devices=0",
            actual=describe_exception(error),
            hint="Raise ConfigurationError (trainspec.errors) naming the valid range.",
            snippet=repro,
        ) from error
    else:
        raise failure(
            target,
            "ERR-1",
            expected="raise a trainspec.TrainspecError subclass for the bad request devices=0",
            actual="parse_devices(0) returned normally",
            snippet=repro,
        )
    if not str(raised).strip():
        raise failure(
            target,
            "ERR-1",
            expected="give its error a message naming the value and the valid choices",
            actual=f"{type(raised).__name__} with an empty message",
            snippet=repro,
        )
    try:
        copy = pickle.loads(pickle.dumps(raised))
    except Exception as error:
        raise failure(
            target,
            "ERR-1",
            expected="raise errors that survive a pickle round trip",
            actual=f"{type(raised).__name__} does not round-trip: {describe_exception(error)}",
            hint="Keep the error's __init__ compatible with its args, or define __reduce__.",
            snippet=repro,
        ) from error
    if type(copy) is not type(raised) or str(copy) != str(raised):
        raise failure(
            target,
            "ERR-1",
            expected="raise errors whose type and message survive a pickle round trip",
            actual=f"{describe_value(raised)} came back as {describe_value(copy)}",
            snippet=repro,
        )
