"""Deprecated: use :mod:`trainspec.reference.cluster_environments`.

The environment concept has one name everywhere: the protocol :class:`trainspec.
ClusterEnvironment`, the kind ``cluster_environment``, the checks
``trainspec.conformance.checks.cluster_environment``, the reference package
``trainspec.reference.cluster_environments`` and the entry-point group
``trainspec.cluster_environments``. This package was the reference package's old name.
Importing it (or any of its submodules, ``trainspec.reference.environments.local`` and so on)
emits a :class:`DeprecationWarning` and gives the very same modules and objects; it will be
removed in a future release.
"""

from __future__ import annotations

import sys
import warnings

from trainspec.reference import cluster_environments as _canonical
from trainspec.reference.cluster_environments import *  # noqa: F403 (the whole public API)
from trainspec.reference.cluster_environments import __all__ as __all__
from trainspec.reference.cluster_environments import (
    _variables,
    detection,
    local,
    slurm,
    torchelastic,
    xla,
)

# The old submodule names are the canonical modules themselves (not copies): an import of
# ``trainspec.reference.environments.local`` finds it here after this package ran.
for _module in (_variables, detection, local, slurm, torchelastic, xla):
    sys.modules[f"{__name__}.{_module.__name__.rpartition('.')[2]}"] = _module
del _module, _canonical

warnings.warn(
    "trainspec.reference.environments is deprecated; import from "
    "trainspec.reference.cluster_environments instead (same names, same objects)",
    DeprecationWarning,
    stacklevel=2,
)
