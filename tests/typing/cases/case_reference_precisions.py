"""The reference precisions satisfy :class:`trainspec.Precision` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from typing_extensions import assert_type

from trainspec import Precision
from trainspec.reference.precisions import (
    BFloat16MixedPrecision,
    BFloat16Precision,
    Float16MixedPrecision,
    Float16Precision,
    Float32Precision,
    Float64Precision,
    precision_for_flag,
)

precisions: list[Precision] = [
    Float32Precision(),
    Float64Precision(),
    Float16Precision(),
    BFloat16Precision(),
    Float16MixedPrecision(),
    BFloat16MixedPrecision(),
]
assert_type(precision_for_flag("bf16-mixed"), Precision)
