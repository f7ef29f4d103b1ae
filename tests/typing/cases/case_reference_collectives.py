"""The reference collectives satisfy :class:`trainspec.Collective` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from trainspec import Collective
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.reference.collectives.torch_dist import TorchCollective

single: Collective = SingleProcessCollective()
torch_dist: Collective = TorchCollective()
