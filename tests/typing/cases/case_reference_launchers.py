"""The reference launchers satisfy :class:`trainspec.Launcher` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from trainspec import Launcher
from trainspec.reference.launchers.spawn import MultiprocessingLauncher
from trainspec.reference.launchers.subprocess_script import SubprocessScriptLauncher

spawn: Launcher = MultiprocessingLauncher(2)
subprocess_script: Launcher = SubprocessScriptLauncher(2)
