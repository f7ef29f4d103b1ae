"""Reference strategies: the shared :class:`StrategyBase`, :class:`SingleDeviceStrategy`,
:class:`DDPStrategy`, :class:`FSDPStrategy`.

Names are loaded on first access, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from trainspec.reference.strategies.base import LifecycleState, StrategyBase
    from trainspec.reference.strategies.ddp import DDPStrategy
    from trainspec.reference.strategies.fsdp import FSDPStrategy
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy

__all__ = ["DDPStrategy", "FSDPStrategy", "LifecycleState", "SingleDeviceStrategy", "StrategyBase"]

_EXPORTS: Final = {
    "DDPStrategy": "trainspec.reference.strategies.ddp",
    "FSDPStrategy": "trainspec.reference.strategies.fsdp",
    "LifecycleState": "trainspec.reference.strategies.base",
    "SingleDeviceStrategy": "trainspec.reference.strategies.single_device",
    "StrategyBase": "trainspec.reference.strategies.base",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
