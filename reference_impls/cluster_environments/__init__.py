"""Reference cluster environments (`trainspec.reference.cluster_environments`): where the
ranks of a run come from.

- :class:`LocalEnvironment`: this machine, with ranks started by a trainspec launcher;
- :class:`TorchElasticEnvironment`: ranks started by ``torchrun``;
- :class:`SLURMEnvironment`: ranks started by ``srun``;
- :class:`XLAEnvironment`: ranks started by ``torch_xla``'s ``xmp.spawn`` (used by the XLA
  strategy; not part of detection);
- :func:`detect_environment`: the first of them that detects, in :data:`DETECTION_ORDER`.

None of them imports torch. The package is named like the protocol and the kind
(``cluster_environment``) and its entry-point group (``trainspec.cluster_environments``); its
old name, ``trainspec.reference.environments``, is a deprecated alias.
"""

from __future__ import annotations

from trainspec.reference.cluster_environments.detection import DETECTION_ORDER, detect_environment
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.slurm import SLURMEnvironment, first_host
from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment
from trainspec.reference.cluster_environments.xla import XLAEnvironment

__all__ = [
    "DETECTION_ORDER",
    "LocalEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
    "detect_environment",
    "first_host",
]
