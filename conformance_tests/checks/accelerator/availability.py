"""ACC-1 ... ACC-3: the device type is a constant torch device type, availability never
raises and has no side effects, and the device count agrees with it."""

from __future__ import annotations

import torch

from trainspec.conformance._helpers import describe_exception, describe_value, failure, snippet
from trainspec.conformance.checks.accelerator._fixtures import _assert_no_side_effects, _Target
from trainspec.conformance.core import CheckSkipped, check

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
