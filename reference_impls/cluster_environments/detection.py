"""Which cluster environment this process runs in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.slurm import SLURMEnvironment
from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment

if TYPE_CHECKING:
    from trainspec.cluster_environment import ClusterEnvironment

__all__ = ["DETECTION_ORDER", "detect_environment"]

DETECTION_ORDER: Final[tuple[type[ClusterEnvironment], ...]] = (
    TorchElasticEnvironment,
    SLURMEnvironment,
    LocalEnvironment,
)
"""The order :func:`detect_environment` tries: ``torchrun`` first (it may run inside a SLURM
allocation, and then it, not SLURM, started the ranks), then SLURM, then the local fallback,
which always detects."""


def detect_environment() -> ClusterEnvironment:
    """A new instance of the first class of :data:`DETECTION_ORDER` whose ``detect()`` is
    ``True``; :class:`LocalEnvironment` when no scheduler is detected.

    Detection only reads variables and never raises (ENV-1); call ``validate()`` on the
    result to check the variables are consistent.
    """
    for cls in DETECTION_ORDER:
        environment = cls()
        if environment.detect():
            return environment
    return LocalEnvironment()  # unreachable while LocalEnvironment is last; kept for safety
