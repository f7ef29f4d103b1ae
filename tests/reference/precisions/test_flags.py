"""The flag classes, their bases and precision_for_flag."""

from __future__ import annotations

import pytest

import trainspec.reference.precisions as precisions
from trainspec import PRECISION_FLAGS, ConfigurationError, Precision
from trainspec.reference.precisions import (
    PRECISION_CLASSES,
    BFloat16MixedPrecision,
    BFloat16Precision,
    Float16MixedPrecision,
    Float16Precision,
    Float32Precision,
    Float64Precision,
    MixedPrecision,
    TruePrecision,
    precision_for_flag,
)

EXPECTED = {
    "32-true": (Float32Precision, TruePrecision),
    "64-true": (Float64Precision, TruePrecision),
    "16-true": (Float16Precision, TruePrecision),
    "bf16-true": (BFloat16Precision, TruePrecision),
    "16-mixed": (Float16MixedPrecision, MixedPrecision),
    "bf16-mixed": (BFloat16MixedPrecision, MixedPrecision),
}


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_each_flag_has_a_no_argument_class(flag: str) -> None:
    cls, base = EXPECTED[flag]
    instance = cls()
    assert instance.flag == flag
    assert isinstance(instance, base)
    assert isinstance(instance, Precision)
    assert Precision in cls.__mro__, "explicit subclass: missing members fail at instantiation"
    assert type(precision_for_flag(flag)) is cls
    assert PRECISION_CLASSES[flag] is cls


def test_precision_classes_follow_the_flag_order() -> None:
    assert tuple(PRECISION_CLASSES) == PRECISION_FLAGS


@pytest.mark.parametrize("bad", ["32", "fp16", "16-MIXED", "", None, 16])
def test_unknown_flags_raise_configuration_error_listing_the_valid_ones(bad: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        precision_for_flag(bad)  # type: ignore[arg-type]
    assert all(flag in str(info.value) for flag in PRECISION_FLAGS)


@pytest.mark.parametrize(
    ("base", "flag"), [(TruePrecision, "16-mixed"), (MixedPrecision, "32-true")]
)
def test_bases_refuse_the_other_family(base: type[Precision], flag: str) -> None:
    with pytest.raises(ConfigurationError):
        base(flag)  # type: ignore[call-arg]


def test_public_names_are_exported() -> None:
    for name in precisions.__all__:
        assert hasattr(precisions, name)
    assert "precision_for_flag" in precisions.__all__
