"""Reference cluster environments: where the ranks of a run come from.

- :class:`LocalEnvironment`: this machine, with ranks started by a trainspec launcher;
- :class:`TorchElasticEnvironment`: ranks started by ``torchrun``;
- :class:`SLURMEnvironment`: ranks started by ``srun``;
- :class:`XLAEnvironment`: ranks started by ``torch_xla``'s ``xmp.spawn`` (used by the XLA
  strategy; not part of detection);
- :func:`detect_environment`: the first of them that detects, in :data:`DETECTION_ORDER`.

None of them imports torch.
"""

from __future__ import annotations

from trainspec.reference.environments.detection import DETECTION_ORDER, detect_environment
from trainspec.reference.environments.local import LocalEnvironment
from trainspec.reference.environments.slurm import SLURMEnvironment, first_host
from trainspec.reference.environments.torchelastic import TorchElasticEnvironment
from trainspec.reference.environments.xla import XLAEnvironment

__all__ = [
    "DETECTION_ORDER",
    "LocalEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
    "detect_environment",
    "first_host",
]
