"""From a precision flag to the reference precision that implements it."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value
from trainspec.reference.precisions.mixed import BFloat16MixedPrecision, Float16MixedPrecision
from trainspec.reference.precisions.true import (
    BFloat16Precision,
    Float16Precision,
    Float32Precision,
    Float64Precision,
)
from trainspec.types import PRECISION_FLAGS, PrecisionFlag

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from trainspec.precision import Precision

__all__ = ["PRECISION_CLASSES", "precision_for_flag"]

PRECISION_CLASSES: Final[Mapping[PrecisionFlag, Callable[[], Precision]]] = MappingProxyType(
    {
        "32-true": Float32Precision,
        "64-true": Float64Precision,
        "16-true": Float16Precision,
        "bf16-true": BFloat16Precision,
        "16-mixed": Float16MixedPrecision,
        "bf16-mixed": BFloat16MixedPrecision,
    }
)
"""The reference precision class of every flag, in :data:`~trainspec.PRECISION_FLAGS` order."""


def precision_for_flag(flag: str) -> Precision:
    """A new reference precision for ``flag``.

    Raises:
        ConfigurationError: ``flag`` is not one of :data:`~trainspec.PRECISION_FLAGS`; the
            message lists them.
    """
    # Compare only strings: '==' with a numpy array gives an array, whose truth value raises.
    if isinstance(flag, str):
        for known, factory in PRECISION_CLASSES.items():
            if flag == known:
                return factory()
    raise ConfigurationError(
        f"unknown precision flag {describe_value(flag)}; valid: {', '.join(PRECISION_FLAGS)}"
    )
