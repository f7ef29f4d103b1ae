"""The reference strategies satisfy :class:`trainspec.Strategy` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class, and a line per optional
capability a strategy implements (``sync: BackwardSyncControl = DDPStrategy()``).
"""

from __future__ import annotations

from trainspec import Strategy
from trainspec.reference.strategies.ddp import DDPStrategy
from trainspec.reference.strategies.single_device import SingleDeviceStrategy
from trainspec.reference.strategies.xla import XLAStrategy

single_device: Strategy = SingleDeviceStrategy()
ddp: Strategy = DDPStrategy()
xla: Strategy = XLAStrategy()
