"""The trainspec error hierarchy: part of every protocol's contract.

Every error a conforming implementation raises for bad input, a bad state or a failed
operation is one of these. Errors from torch, pickle, fsspec and the operating system are
translated once, at the boundary of the implementation that met them, and the original error
is kept as ``__cause__``.

::

    TrainspecError
    ├── ConfigurationError          (also ValueError)   bad flag, device request, combination
    │   └── UnsupportedError                            a valid choice this component cannot do
    ├── DeviceUnavailableError      (also RuntimeError) the device type or index is not here
    ├── LifecycleError              (also RuntimeError) a method called in the wrong state
    ├── CheckpointError
    │   ├── CheckpointNotFoundError (also FileNotFoundError)
    │   ├── CheckpointCorruptedError                    truncated, empty, wrong format
    │   ├── UnsafeCheckpointError                       needs code execution to load
    │   └── CheckpointWriteError    (also OSError)      disk full, no permission, not a file
    ├── CollectiveError             (also RuntimeError)
    │   ├── CollectiveTimeoutError  (also TimeoutError) a collective did not finish in time
    │   └── PeerFailureError                            another rank died or left
    └── LaunchError                 (also RuntimeError) a launched rank failed

Messages name what was wrong and what is allowed. The conformance kit asserts exception
*types* from this module, never message text.
"""

from __future__ import annotations

__all__ = [
    "CheckpointCorruptedError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointWriteError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "ConfigurationError",
    "DeviceUnavailableError",
    "LaunchError",
    "LifecycleError",
    "PeerFailureError",
    "TrainspecError",
    "UnsafeCheckpointError",
    "UnsupportedError",
]


class TrainspecError(Exception):
    """Base class of every error that trainspec and conforming plugins raise on purpose."""


class ConfigurationError(TrainspecError, ValueError):
    """A flag, device request, name or combination of components is not valid.

    The message names the value that was given and the values that are allowed.
    """


class UnsupportedError(ConfigurationError):
    """A choice that is valid in general is not supported by this component or device.

    Example: ``precision="16-mixed"`` on an accelerator whose autocast has no float16.
    """


class DeviceUnavailableError(TrainspecError, RuntimeError):
    """The requested device type or device index does not exist on this machine."""


class LifecycleError(TrainspecError, RuntimeError):
    """A method was called in a state where the protocol does not allow it.

    Example: ``Strategy.setup_module`` before ``Strategy.setup_environment``.
    """


class CheckpointError(TrainspecError):
    """Base class of the checkpoint errors; the message names the path."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint exists at the path that was loaded."""


class CheckpointCorruptedError(CheckpointError):
    """The file exists but is not a complete checkpoint of the expected format."""


class UnsafeCheckpointError(CheckpointError):
    """Loading would execute arbitrary code (a pickle with non-allowlisted objects).

    The message says how to opt in explicitly for checkpoints from a trusted source.
    """


class CheckpointWriteError(CheckpointError, OSError):
    """The checkpoint could not be written (no space, no permission, a directory in the way).

    The checkpoint that was at the path before the save is left intact.
    """


class CollectiveError(TrainspecError, RuntimeError):
    """A collective operation failed."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A collective did not complete within its timeout; the group has been torn down."""


class PeerFailureError(CollectiveError):
    """Another rank exited, crashed or closed its connection during a collective."""


class LaunchError(TrainspecError, RuntimeError):
    """A rank started by a launcher failed.

    The message names the failing rank and includes its traceback or signal name.
    """

    def __init__(self, message: str, *, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
