"""The Accelerator protocol: device logic only.

The contract, lifecycle first, is the docstring of :class:`Accelerator`
(``help(trainspec.Accelerator)``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from trainspec.types import DeviceRequest

__all__ = ["Accelerator"]


@runtime_checkable
class Accelerator(Protocol):
    """Device logic for one device type. Instances carry their own configuration.

    Lifecycle (every call on the rank that uses the device)::

        1) (anyone, any time) is_available(), device_count(), parse_devices(request)
        2) (strategy, once per process, before any tensor is placed) setup_device(device)
        3) (strategy, during training) synchronize(device), get_device_stats(device)
        4) (strategy, at the end) teardown()  -- then 2) may run again

    An Accelerator knows one device type (``"cpu"``, ``"cuda"``, ``"xla"``, ...). It answers
    whether that type is usable here, how many devices there are, turns a user's device request
    into ``torch.device`` objects, prepares and releases a device, and reports statistics. It knows
    nothing of ranks, dtypes or files.

    Clauses ACC-1 ... ACC-10 in docs/spec.md.
    """

    @property
    @abstractmethod
    def device_type(self) -> str:
        """The ``torch.device`` type this accelerator manages, e.g. ``"cuda"``.

        **Must** be constant for the life of the instance and be accepted by
        ``torch.device(device_type)`` (ACC-1).
        """

    @abstractmethod
    def is_available(self) -> bool:
        """Whether at least one device of this type can be used in this process.

        **Must not** raise, whatever the machine has installed (a missing driver or vendor
        package gives ``False``), and **must not** initialise the device, start threads or
        change global state (ACC-2). Repeated calls give the same answer. An implementation
        **may** import its vendor package and query its runtime once (the answer is then
        cached), where the device count cannot be known otherwise (XLA).
        """

    @abstractmethod
    def device_count(self) -> int:
        """How many devices of this type this process can see; ``0`` when unavailable.

        **Must not** raise; ``device_count() > 0`` iff ``is_available()`` (ACC-3).
        """

    @abstractmethod
    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        """Turn a user's device request into distinct devices of this type.

        Accepted forms (ACC-4): a positive ``int`` *n* (the first *n* devices); ``-1`` or
        ``"-1"`` (all devices); ``"auto"`` (all devices, or one for device types that run one
        device per process); a digit string (``"2"``, as the int); a comma-separated index list
        (``"0,1"``, ``"1,"``); a sequence of ``int`` indices (``[0, 1]``).

        The result **must** be a non-empty list of ``torch.device`` objects whose ``type`` is
        :attr:`device_type`, one per requested device, in the order requested. They **must**
        be distinct, except for a device type whose processes share one device (``"cpu"``),
        which returns *n* equal ``torch.device("cpu")``, one per process (ACC-4).

        **Must** raise :class:`~trainspec.ConfigurationError` naming the valid range for zero
        devices, negative counts other than ``-1``, booleans, duplicate or malformed indices and
        any other type (ACC-5); and :class:`~trainspec.DeviceUnavailableError` (or
        ``ConfigurationError``) when more devices or a higher index than exist are asked for
        (ACC-6). **Must not** initialise the device.
        """

    @abstractmethod
    def setup_device(self, device: torch.device) -> None:
        """Prepare ``device`` for use by this process (select it as current, etc.).

        **Must** raise :class:`~trainspec.ConfigurationError` for a device of another type
        (ACC-7) and :class:`~trainspec.DeviceUnavailableError` for an index that does not exist.
        Calling it twice with the same device **must** be harmless (ACC-8).
        """

    @abstractmethod
    def teardown(self) -> None:
        """Release what :meth:`setup_device` acquired (caches, streams).

        **Must** be idempotent and safe without a prior ``setup_device``; the accelerator
        **must** be usable again (``setup_device`` may be called) afterwards (ACC-8).
        """

    @abstractmethod
    def synchronize(self, device: torch.device) -> None:
        """Block until all queued work on ``device`` has finished.

        A no-op is correct for synchronous devices. A device of another type **must** raise
        :class:`~trainspec.ConfigurationError` (ACC-7, ACC-9).
        """

    @abstractmethod
    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Device statistics (memory in bytes, utilisation, ...) as finite numbers.

        Keys are implementation-defined; an empty dict is allowed. A device of another type
        **must** raise :class:`~trainspec.ConfigurationError` (ACC-7, ACC-10).
        """
