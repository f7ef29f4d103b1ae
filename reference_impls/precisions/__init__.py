"""Reference precisions: one class per flag, their bases, and :func:`precision_for_flag`.

Every class subclasses :class:`trainspec.Precision` explicitly (a missing member fails at
instantiation). Supported on CPU with torch 2.13: all six flags (float16 and bfloat16 matmul
and autocast, and ``GradScaler("cpu")``, all work there).
"""

from __future__ import annotations

from trainspec.reference.precisions.base import DtypePrecision
from trainspec.reference.precisions.flags import PRECISION_CLASSES, precision_for_flag
from trainspec.reference.precisions.loss_scaler import LossScaler, ScalerState
from trainspec.reference.precisions.mixed import (
    BFloat16MixedPrecision,
    Float16MixedPrecision,
    MixedPrecision,
)
from trainspec.reference.precisions.true import (
    BFloat16Precision,
    Float16Precision,
    Float32Precision,
    Float64Precision,
    TruePrecision,
)

__all__ = [
    "PRECISION_CLASSES",
    "BFloat16MixedPrecision",
    "BFloat16Precision",
    "DtypePrecision",
    "Float16MixedPrecision",
    "Float16Precision",
    "Float32Precision",
    "Float64Precision",
    "LossScaler",
    "MixedPrecision",
    "ScalerState",
    "TruePrecision",
    "precision_for_flag",
]
