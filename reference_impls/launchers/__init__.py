"""Reference launchers: how the ranks of a run on one machine are started.

- :class:`SubprocessScriptLauncher`: this process is rank 0, the others re-run the script;
- :class:`MultiprocessingLauncher`: every rank is a new :mod:`multiprocessing` process
  (for notebooks and functions);
- :class:`XLALauncher`: one rank per XLA device, through ``torch_xla``'s ``xmp.spawn``.

When a scheduler or ``torchrun`` already started the ranks
(``cluster_environment.creates_processes_externally``), a strategy needs no launcher. Neither
module imports torch. :func:`is_secondary` is the launchers' blame rule (an error that echoes
another rank's failure), public so that the conformance kit's reports blame the same rank.
"""

from __future__ import annotations

from trainspec.reference.launchers._supervision import is_secondary
from trainspec.reference.launchers.spawn import MultiprocessingLauncher, StartMethod
from trainspec.reference.launchers.subprocess_script import (
    SubprocessScriptLauncher,
    script_command,
)
from trainspec.reference.launchers.xla import XLALauncher

__all__ = [
    "MultiprocessingLauncher",
    "StartMethod",
    "SubprocessScriptLauncher",
    "XLALauncher",
    "is_secondary",
    "script_command",
]
