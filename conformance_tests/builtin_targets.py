"""The built-in reference implementations that ``trainspec verify`` (no arguments) runs.

One row per target: kind, a short name and the ``"module:factory"`` to load. The
capabilities and options are declared on the implementation itself (``conformance_capabilities``
/ ``conformance_options``, read by :func:`trainspec.conformance.runner.make_target`); a row
adds only what depends on this machine (``fsspec_urls`` when fsspec is installed). A row whose
module cannot be imported here (a backend that is not installed), or whose optional extra is
missing (``requires``), is reported as skipped with the reason, not as a failure.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from trainspec.conformance.core import Kind, Target

__all__ = [
    "BUILTIN_TARGETS",
    "BuiltinTarget",
    "builtin_targets",
    "declares",
    "ddp_strategy_for_this_world",
    "fsdp_strategy_for_this_world",
    "spawn_launcher",
    "trusted_background_io",
    "trusted_torch_io",
]


@dataclass(frozen=True)
class BuiltinTarget:
    """A reference implementation the kit verifies by default."""

    kind: Kind
    name: str
    factory: str
    """``"package.module:attribute"``: a zero-argument factory (usually the class)."""
    capabilities: frozenset[str] = frozenset()
    options: Mapping[str, object] = field(default_factory=dict)
    option_refs: Mapping[str, str] = field(default_factory=dict)
    """Options whose value is loaded with the target: option name -> ``"module:attribute"``
    (so this table imports nothing heavy)."""
    optional_capabilities: Mapping[str, str] = field(default_factory=dict)
    """Capabilities declared only when a module is importable here: name -> module name
    (``{"fsspec_urls": "fsspec"}``)."""
    world_size: int | None = None
    """Run on this many local ranks through the distributed harness (``None``: in-process)."""
    requires: tuple[str, ...] = ()
    """Modules of optional extras the implementation needs (``("safetensors",)``): without
    one, :meth:`load` raises and the row is skipped, as for a module that cannot import."""

    def load(self) -> Target[object]:
        """The target this row describes, importing its factory and option values.

        Raises :class:`~trainspec.ConfigurationError` (one line) when something cannot be
        imported; the caller reports the row as skipped.
        """
        from trainspec.conformance.runner import load_object, make_target
        from trainspec.errors import ConfigurationError

        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigurationError(
                f"the package {', '.join(repr(m) for m in missing)} is not installed: "
                f"pip install 'trainspec[{missing[0]}]'"
            )
        factory = load_object(self.factory)
        options = dict(self.options)
        for option, ref in self.option_refs.items():
            value = load_object(ref)
            if isinstance(value, (set, frozenset)):  # options take sequences, in a stable order
                value = tuple(sorted(value, key=str))
            options[option] = value
        capabilities = set(self.capabilities)
        for capability, module in self.optional_capabilities.items():
            if importlib.util.find_spec(module) is not None:
                capabilities.add(capability)
        return make_target(
            self.kind, factory, name=self.name, capabilities=capabilities, options=options
        )


_PRECISIONS: Final[tuple[tuple[str, str], ...]] = (
    ("32-true", "Float32Precision"),
    ("64-true", "Float64Precision"),
    ("16-true", "Float16Precision"),
    ("bf16-true", "BFloat16Precision"),
    ("16-mixed", "Float16MixedPrecision"),
    ("bf16-mixed", "BFloat16MixedPrecision"),
)

_F = TypeVar("_F", bound="Callable[..., object]")


def declares(
    *, capabilities: Iterable[str] = (), options: Mapping[str, object] | None = None
) -> Callable[[_F], _F]:
    """Put conformance declarations on a factory function, as a class carries them in its
    ``conformance_capabilities`` / ``conformance_options`` attributes."""

    def mark(func: _F) -> _F:
        setattr(func, "conformance_capabilities", frozenset(capabilities))  # noqa: B010
        setattr(func, "conformance_options", dict(options or {}))  # noqa: B010
        return func

    return mark


def trusted_torch_io() -> object:
    """``TorchCheckpointIO(weights_only=False)``: the explicit opt-in CKPT-8's check loads
    pickled content with (the ``trusted_factory`` option)."""
    from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

    return TorchCheckpointIO(weights_only=False)


def trusted_background_io() -> object:
    """A ``BackgroundCheckpointIO`` around :func:`trusted_torch_io`."""
    from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
    from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

    return BackgroundCheckpointIO(TorchCheckpointIO(weights_only=False))


@declares(capabilities={"data_parallel"})
def ddp_strategy_for_this_world() -> object:
    """A ``DDPStrategy`` with one CPU device per rank of the harness's world (``WORLD_SIZE``)."""
    import os

    import torch

    from trainspec.reference.strategies.ddp import DDPStrategy

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return DDPStrategy(parallel_devices=[torch.device("cpu")] * world_size)


@declares(capabilities={"sharded_checkpoint"})
def fsdp_strategy_for_this_world() -> object:
    """An ``FSDPStrategy`` (sharded checkpoint layout, its ``DCPCheckpointIO``) with one CPU
    device per rank of the harness's world (``WORLD_SIZE``)."""
    import os

    import torch

    from trainspec.reference.strategies.fsdp import FSDPStrategy

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return FSDPStrategy(parallel_devices=[torch.device("cpu")] * world_size)


@declares(capabilities={"multi_process"}, options={"num_processes": 2})
def spawn_launcher() -> object:
    """A two-process ``MultiprocessingLauncher`` (spawn)."""
    from trainspec.reference.launchers.spawn import MultiprocessingLauncher

    return MultiprocessingLauncher(2)


_HERE: Final = "trainspec.conformance.builtin_targets"

BUILTIN_TARGETS: Final[tuple[BuiltinTarget, ...]] = (
    BuiltinTarget("accelerator", "cpu", "trainspec.reference.accelerators.cpu:CPUAccelerator"),
    *(
        BuiltinTarget("precision", flag, f"trainspec.reference.precisions:{cls}")
        for flag, cls in _PRECISIONS
    ),
    BuiltinTarget(
        "checkpoint_io",
        "torch",
        "trainspec.reference.checkpoint_io.torch_io:TorchCheckpointIO",
        optional_capabilities={"fsspec_urls": "fsspec"},
    ),
    BuiltinTarget(
        "checkpoint_io",
        "async",
        "trainspec.reference.checkpoint_io.background:BackgroundCheckpointIO",
        optional_capabilities={"fsspec_urls": "fsspec"},
    ),
    BuiltinTarget(
        "checkpoint_io", "memory", "trainspec.reference.checkpoint_io.memory:MemoryCheckpointIO"
    ),
    BuiltinTarget(
        "checkpoint_io",
        "safetensors",
        "trainspec.reference.checkpoint_io.safetensors_io:SafetensorsCheckpointIO",
        optional_capabilities={"fsspec_urls": "fsspec"},
        requires=("safetensors",),  # the `safetensors` extra
    ),
    BuiltinTarget(
        "collective", "single", "trainspec.reference.collectives.single:SingleProcessCollective"
    ),
    BuiltinTarget(
        "cluster_environment",
        "local",
        "trainspec.reference.cluster_environments.local:LocalEnvironment",
    ),
    BuiltinTarget("launcher", "spawn", f"{_HERE}:spawn_launcher"),
    BuiltinTarget(
        "strategy",
        "single_device",
        "trainspec.reference.strategies.single_device:SingleDeviceStrategy",
    ),
    BuiltinTarget(
        "collective",
        "torch (2 gloo ranks)",
        "trainspec.reference.collectives.torch_dist:TorchCollective",
        world_size=2,
    ),
    BuiltinTarget(
        "strategy", "ddp (2 gloo ranks)", f"{_HERE}:ddp_strategy_for_this_world", world_size=2
    ),
    BuiltinTarget(
        "strategy", "fsdp (2 gloo ranks)", f"{_HERE}:fsdp_strategy_for_this_world", world_size=2
    ),
)
"""Every built-in target, in the order ``trainspec verify`` runs them. What each implementation
can do (capabilities, options) is declared on it; a row only says what to run here."""


def builtin_targets(kind: str | None = None) -> list[BuiltinTarget]:
    """The built-in targets, optionally only those of ``kind``."""
    return [t for t in BUILTIN_TARGETS if kind is None or t.kind == kind]
