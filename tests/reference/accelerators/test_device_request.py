"""The shared device-request parser (ACC-4, ACC-5, ACC-6), as a pure function."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainspec import ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators.device_request import (
    describe_valid_requests,
    parse_device_request,
)


def parse(request: object, available: int = 4, auto_count: int | None = None) -> list[int]:
    return parse_device_request(
        request, device_type="cuda", available=available, auto_count=auto_count
    )


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (1, [0]),
        (3, [0, 1, 2]),
        (-1, [0, 1, 2, 3]),
        ("-1", [0, 1, 2, 3]),
        ("auto", [0, 1, 2, 3]),
        (" AUTO ", [0, 1, 2, 3]),
        ("2", [0, 1]),
        ("0,1", [0, 1]),
        ("3, 1", [3, 1]),
        ("1,", [1]),
        ("0", None),
        ([2, 0], [2, 0]),
        ((3,), [3]),
        (range(2), [0, 1]),
    ],
)
def test_valid_requests_give_indices_in_request_order(
    request_: object, expected: list[int] | None
) -> None:
    if expected is None:
        with pytest.raises(ConfigurationError):
            parse(request_)
    else:
        assert parse(request_) == expected


@pytest.mark.parametrize(
    "request_",
    [
        0,
        -2,
        True,
        False,
        2.0,
        None,
        "",
        "two",
        "1.5",
        "-2",
        ",",
        ",1",
        "0,,1",
        "0,-1",
        "0,0",
        [],
        [0, 0],
        [-1],
        [True],
        [1.0],
        ["0"],
        {0, 1},
        b"1",
        {"devices": 1},
    ],
)
def test_malformed_requests_raise_configuration_error_naming_the_valid_range(
    request_: object,
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(request_)
    assert not isinstance(info.value, DeviceUnavailableError)
    assert "1..4" in str(info.value)


@pytest.mark.parametrize("request_", [5, "5", [4], [0, 9], "0,4", "4,"])
def test_requests_beyond_the_available_devices_raise_device_unavailable(
    request_: object,
) -> None:
    with pytest.raises(DeviceUnavailableError) as info:
        parse(request_)
    assert "indices 0..3" in str(info.value)


@pytest.mark.parametrize("request_", [1, -1, "auto", [0], "0,"])
def test_any_request_without_devices_raises_device_unavailable(request_: object) -> None:
    with pytest.raises(DeviceUnavailableError):
        parse(request_, available=0)


def test_malformed_requests_are_configuration_errors_even_without_devices() -> None:
    with pytest.raises(ConfigurationError):
        parse(0, available=0)


def test_auto_count_limits_auto_but_not_minus_one() -> None:
    assert parse("auto", auto_count=1) == [0]
    assert parse(-1, auto_count=1) == [0, 1, 2, 3]


def test_the_message_names_request_and_range() -> None:
    with pytest.raises(DeviceUnavailableError) as info:
        parse_device_request(5, device_type="cpu", available=2)
    assert str(info.value) == (
        "devices=5 asks for 5 cpu devices but 2 exist; valid: 1..2, -1, 'auto', or indices 0..1"
    )
    assert describe_valid_requests(1) == "1, -1, 'auto', or index 0"


@given(count=st.integers(min_value=-10, max_value=20), available=st.integers(0, 8))
def test_integer_counts_follow_the_spec(count: int, available: int) -> None:
    if count == 0 or count < -1:
        with pytest.raises(ConfigurationError):
            parse(count, available)
    elif available == 0 or count > available:
        with pytest.raises(DeviceUnavailableError):
            parse(count, available)
    else:
        expected = list(range(available if count == -1 else count))
        assert parse(count, available) == expected
        assert parse(str(count), available) == expected


@given(
    indices=st.lists(st.integers(min_value=-3, max_value=10), min_size=1, max_size=6),
    available=st.integers(0, 8),
    as_string=st.booleans(),
)
def test_index_lists_follow_the_spec(indices: list[int], available: int, as_string: bool) -> None:
    request: object = ",".join(map(str, indices)) + ("," if len(indices) == 1 else "")
    if not as_string:
        request = indices
    if min(indices) < 0 or len(set(indices)) != len(indices):
        with pytest.raises(ConfigurationError):
            parse(request, available)
    elif max(indices) >= available:
        with pytest.raises(DeviceUnavailableError):
            parse(request, available)
    else:
        result = parse(request, available)
        assert result == indices
        assert len(set(result)) == len(result)
