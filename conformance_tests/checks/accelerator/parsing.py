"""ACC-4 ... ACC-6: device requests parse to distinct devices of this type, invalid requests
raise ConfigurationError naming the valid forms, and requests beyond the available devices are
refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    int_option,
    run_examples,
    snippet,
)
from trainspec.conformance.checks.accelerator._fixtures import _assert_no_side_effects, _Target
from trainspec.conformance.core import CheckSkipped, check
from trainspec.conformance.hypothesis_strategies import (
    MALFORMED_REQUESTS,
    DeviceRequestCase,
    device_requests,
)
from trainspec.errors import ConfigurationError, DeviceUnavailableError

if TYPE_CHECKING:
    from trainspec.accelerator import Accelerator

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
