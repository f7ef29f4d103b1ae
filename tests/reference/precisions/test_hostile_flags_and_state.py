"""Hostile precision flags and loss-scaler states raise ConfigurationError naming what is valid.

Regression tests for the fuzzing findings ``huge-int`` (an int of more than 4300 digits
crashed the message), ``array-flag`` (``flag == known`` on a numpy array raised "truth value
of an array is ambiguous") and ``scaler-overflow`` (``math.isfinite(10**400)`` raised
``OverflowError``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from trainspec import PRECISION_FLAGS, ConfigurationError
from trainspec.reference.precisions import (
    Float16MixedPrecision,
    Float32Precision,
    MixedPrecision,
    TruePrecision,
    precision_for_flag,
)

HUGE = 10 ** (sys.get_int_max_str_digits() + 100)
GOOD = {
    "scale": 8.0,
    "growth_factor": 2.0,
    "backoff_factor": 0.5,
    "growth_interval": 10,
    "growth_tracker": 0,
}


@pytest.mark.parametrize(
    "flag",
    [HUGE, -HUGE, np.array([0, 1]), np.array(["32-true", "32-true"]), torch.tensor([0, 1]),
     "x" * 5000],
    ids=["huge-int", "negative-huge-int", "int-array", "flag-array", "tensor", "long-string"],
)  # fmt: skip
def test_a_hostile_flag_raises_configuration_error_listing_the_flags(flag: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        precision_for_flag(flag)  # type: ignore[arg-type]

    message = str(caught.value)
    assert all(valid in message for valid in PRECISION_FLAGS)
    assert len(message) < 500


@pytest.mark.parametrize(
    ("base", "valid"), [(TruePrecision, "32-true"), (MixedPrecision, "16-mixed")]
)
@pytest.mark.parametrize("flag", [np.array([0, 1]), HUGE], ids=["array", "huge-int"])
def test_the_base_classes_refuse_a_hostile_flag_naming_their_flags(
    base: type, valid: str, flag: object
) -> None:
    with pytest.raises(ConfigurationError, match=valid):
        base(flag)


@pytest.mark.parametrize(
    "scale", [10**400, -(10**400), HUGE], ids=["above-float-range", "negative", "huge"]
)
def test_a_scale_beyond_float_range_is_refused_naming_the_key_and_range(scale: int) -> None:
    precision = Float16MixedPrecision()
    before = precision.state_dict()

    with pytest.raises(ConfigurationError, match=r"'scale' must be a finite number > 0"):
        precision.load_state_dict({**GOOD, "scale": scale})

    assert precision.state_dict() == before


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("growth_factor", 10**400, "> 1"),
        ("backoff_factor", HUGE, "(0, 1)"),
        ("growth_interval", 2**63, "an int in 1.."),
        ("growth_interval", HUGE, "an int in 1.."),
        ("growth_tracker", HUGE, "an int in 0..9"),
    ],
    ids=["growth-factor", "backoff-huge", "interval-beyond-int64", "interval-huge", "tracker"],
)
def test_other_huge_scaler_values_are_refused_naming_the_range(
    key: str, value: int, fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Float16MixedPrecision().load_state_dict({**GOOD, key: value})
    assert repr(key) in str(caught.value) and fragment in str(caught.value)


def test_a_large_but_finite_integral_scale_still_loads() -> None:
    precision = Float16MixedPrecision()
    precision.load_state_dict({**GOOD, "scale": 2**60})
    assert precision.state_dict()["scale"] == float(2**60)


def test_a_stateless_precision_refuses_a_huge_value_naming_the_empty_state() -> None:
    with pytest.raises(ConfigurationError, match=r"expects \{\}") as caught:
        Float32Precision().load_state_dict({"scale": HUGE})
    assert len(str(caught.value)) < 500
