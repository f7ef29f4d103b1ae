"""resolve() with hostile values: a ConfigurationError naming the valid choices, never a crash.

Regression tests for the fuzzing findings ``huge-int`` (an int of more than 4300 digits
crashed the message) and ``array-flag`` (``devices != "auto"`` on a numpy array raised
"truth value of an array is ambiguous").
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from trainspec import PRECISION_FLAGS, ConfigurationError, DeviceUnavailableError
from trainspec.reference.connector import resolve
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

HUGE = 10 ** (sys.get_int_max_str_digits() + 100)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"devices": np.array([0, 1])},
        {"accelerator": np.array(["cpu", "cpu"])},
        {"precision": np.array(["32-true"])},
        {"num_nodes": np.array([1, 1])},
        {"num_nodes": HUGE},
        {"devices": HUGE},
    ],
    ids=["devices-array", "accelerator-array", "precision-array", "num-nodes-array",
         "num-nodes-huge", "devices-huge"],
)  # fmt: skip
def test_a_strategy_instance_with_a_hostile_argument_names_the_defaults(
    kwargs: dict[str, object],
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve(strategy=SingleDeviceStrategy(), **kwargs)  # type: ignore[arg-type]

    message = str(caught.value)
    (name,) = kwargs
    assert f"{name}=" in message  # the default it must keep: 'auto', 1, '32-true'
    assert "constructor" in message


def test_a_strategy_instance_with_default_values_is_still_returned() -> None:
    strategy = SingleDeviceStrategy()
    assert (
        resolve(strategy=strategy, accelerator="auto", devices="auto", precision="32-true")
        is strategy
    )


@pytest.mark.parametrize("num_nodes", [-HUGE, np.array([1, 2])], ids=["negative-huge", "array"])
def test_hostile_num_nodes_names_what_is_valid(num_nodes: object) -> None:
    with pytest.raises(ConfigurationError, match="positive int") as caught:
        resolve(num_nodes=num_nodes)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 500


@pytest.mark.parametrize(
    "precision", [HUGE, np.array([0, 1]), "x" * 5000], ids=["huge", "array", "long"]
)
def test_hostile_precision_lists_the_flags(precision: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve(precision=precision)  # type: ignore[arg-type]
    assert all(repr(flag) in str(caught.value) for flag in PRECISION_FLAGS)
    assert len(str(caught.value)) < 1000


@pytest.mark.parametrize(
    "devices", [HUGE, "9" * 5000, [0, HUGE]], ids=["huge", "digits", "huge-index"]
)
def test_a_huge_device_request_is_unavailable_naming_the_valid_requests(devices: object) -> None:
    with pytest.raises(DeviceUnavailableError, match="'auto'"):
        resolve(accelerator="cpu", devices=devices)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argument", ["accelerator", "strategy", "checkpoint_io", "cluster_environment"]
)
def test_a_huge_int_for_a_named_component_names_the_registered_ones(argument: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve(**{argument: HUGE})  # type: ignore[arg-type]
    assert "int of about" in str(caught.value)
    assert "known: '" in str(caught.value)


@pytest.mark.parametrize("strategy", ["auto", "ddp", "single_device", "xla"])
def test_a_huge_positive_num_nodes_is_a_configuration_error_naming_the_strategy(
    strategy: str,
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve(accelerator="cpu", strategy=strategy, num_nodes=HUGE)

    message = str(caught.value)
    assert "num_nodes=<int of about" in message
    assert "'ddp'" in message or f"{strategy!r}" in message
    assert len(message) < 1000
