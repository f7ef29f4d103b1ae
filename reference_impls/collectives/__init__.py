"""Reference collectives: one rank (:class:`SingleProcessCollective`) and
``torch.distributed`` (:class:`TorchCollective`).

Names are loaded on first access, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from trainspec.reference.collectives.single import SingleProcessCollective
    from trainspec.reference.collectives.torch_dist import TorchCollective

__all__ = ["SingleProcessCollective", "TorchCollective"]

_EXPORTS: Final = {
    "SingleProcessCollective": "trainspec.reference.collectives.single",
    "TorchCollective": "trainspec.reference.collectives.torch_dist",
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
