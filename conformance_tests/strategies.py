"""Deprecated: use :mod:`trainspec.conformance.hypothesis_strategies`.

This module's old name sat beside the :class:`~trainspec.Strategy` protocol and read as if it
were about training strategies; it holds hypothesis strategies. Importing it emits a
:class:`DeprecationWarning` and re-exports the very same objects; it will be removed in a
future release.
"""

from __future__ import annotations

import warnings

from trainspec.conformance.hypothesis_strategies import *  # noqa: F403 (the whole public API)
from trainspec.conformance.hypothesis_strategies import __all__ as __all__

warnings.warn(
    "trainspec.conformance.strategies is deprecated; import from "
    "trainspec.conformance.hypothesis_strategies instead (same names, same objects)",
    DeprecationWarning,
    stacklevel=2,
)
