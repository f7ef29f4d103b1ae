"""Hostile device requests and device types raise trainspec errors naming the valid choices.

Regression tests for the fuzzing findings ``huge-int`` (an int of more than 4300 digits, or a
string of that many digits, crashed the message or ``int()``) and ``device-type-message``
(``TorchDeviceAccelerator("")`` named no valid device type).
"""

from __future__ import annotations

import sys

import pytest

from trainspec import ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators import CPUAccelerator, TorchDeviceAccelerator
from trainspec.reference.accelerators.device_request import parse_device_request

HUGE = 10 ** (sys.get_int_max_str_digits() + 100)
MANY_DIGITS = "9" * 5000


@pytest.mark.parametrize(
    "request_",
    [HUGE, MANY_DIGITS, f" {MANY_DIGITS} ", f"1,{MANY_DIGITS}", [0, HUGE], f"0,{MANY_DIGITS},"],
    ids=["huge-int", "digits", "padded-digits", "index-list", "list-with-huge-index", "trailing"],
)
def test_a_request_for_more_devices_than_can_exist_is_unavailable(request_: object) -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        CPUAccelerator(num_devices=2).parse_devices(request_)  # type: ignore[arg-type]

    message = str(caught.value)
    assert "'auto'" in message  # the valid requests
    assert len(message) < 500  # the value is quoted, not printed in full


@pytest.mark.parametrize(
    "request_",
    [-HUGE, [-HUGE], "-" + MANY_DIGITS, [0, 1, "x" * 5000]],
    ids=["negative-huge", "negative-huge-index", "negative-digits", "long-string-index"],
)
def test_a_malformed_request_with_a_huge_value_is_a_configuration_error(request_: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        CPUAccelerator(num_devices=2).parse_devices(request_)  # type: ignore[arg-type]

    assert not isinstance(caught.value, DeviceUnavailableError)
    assert "'auto'" in str(caught.value)
    assert len(str(caught.value)) < 500


def test_leading_zeros_do_not_count_as_digits() -> None:
    assert parse_device_request("0" * 5000 + "2", device_type="cpu", available=4) == [0, 1]


@pytest.mark.parametrize("num_devices", [-HUGE, MANY_DIGITS], ids=["negative-huge", "digits"])
def test_a_hostile_slot_count_is_refused_naming_what_is_valid(num_devices: object) -> None:
    with pytest.raises(ConfigurationError, match="positive int"):
        CPUAccelerator(num_devices=num_devices)  # type: ignore[arg-type]


@pytest.mark.parametrize("device_type", ["", " ", "cpu ", "\tcuda", "CPU", "cpu\x00", "gpu"])
def test_an_unparsable_device_type_names_the_valid_types(device_type: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        TorchDeviceAccelerator(device_type)

    message = str(caught.value)
    assert "'cpu'" in message and "'cuda'" in message
    assert "Invalid device string" not in message  # torch's words are the cause, not the message


def test_a_near_miss_of_a_device_type_gets_a_suggestion() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean 'cpu'\?"):
        TorchDeviceAccelerator("cpu ")


def test_a_non_string_device_type_names_the_valid_types() -> None:
    with pytest.raises(ConfigurationError, match="'cpu'") as caught:
        TorchDeviceAccelerator(HUGE)  # type: ignore[arg-type]
    assert "int of about" in str(caught.value)
