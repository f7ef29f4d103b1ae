"""The reference environments satisfy :class:`trainspec.ClusterEnvironment` (positive cases
only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from typing_extensions import assert_type

from trainspec import ClusterEnvironment
from trainspec.reference.cluster_environments import detect_environment
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.slurm import SLURMEnvironment
from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment

local: ClusterEnvironment = LocalEnvironment()
slurm: ClusterEnvironment = SLURMEnvironment()
torchelastic: ClusterEnvironment = TorchElasticEnvironment()
assert_type(detect_environment(), ClusterEnvironment)
