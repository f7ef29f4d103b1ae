"""The built-in reference implementations that ``trainspec verify`` (no arguments) runs.

One row per target: kind, a short name, the ``"module:factory"`` to load, and the
capabilities it declares. A row whose module cannot be imported here (a backend that is not
installed) is reported as skipped with the import error as the reason, not as a failure.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trainspec.conformance.core import Kind, Target

__all__ = [
    "BUILTIN_TARGETS",
    "BuiltinTarget",
    "builtin_targets",
    "ddp_strategy_for_this_world",
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

    def load(self) -> Target[object]:
        """The target this row describes, importing its factory and option values.

        Raises :class:`~trainspec.ConfigurationError` (one line) when something cannot be
        imported; the caller reports the row as skipped.
        """
        from trainspec.conformance.runner import load_object, make_target

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


_PRECISIONS: Final[tuple[tuple[str, str, frozenset[str]], ...]] = (
    ("32-true", "Float32Precision", frozenset()),
    ("64-true", "Float64Precision", frozenset()),
    ("16-true", "Float16Precision", frozenset()),
    ("bf16-true", "BFloat16Precision", frozenset()),
    ("16-mixed", "Float16MixedPrecision", frozenset({"autocast", "gradient_scaling"})),
    ("bf16-mixed", "BFloat16MixedPrecision", frozenset({"autocast"})),
)


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


def ddp_strategy_for_this_world() -> object:
    """A ``DDPStrategy`` with one CPU device per rank of the harness's world (``WORLD_SIZE``)."""
    import os

    import torch

    from trainspec.reference.strategies.ddp import DDPStrategy

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return DDPStrategy(parallel_devices=[torch.device("cpu")] * world_size)


def spawn_launcher() -> object:
    """A two-process ``MultiprocessingLauncher`` (spawn)."""
    from trainspec.reference.launchers.spawn import MultiprocessingLauncher

    return MultiprocessingLauncher(2)


_HERE: Final = "trainspec.conformance.builtin_targets"

_TORCH_FORMAT: Final = frozenset({"python_objects", "strided_tensors", "shared_storage", "pickle"})
"""What the torch.save format stores (the CheckpointIO capabilities of the torch-based IOs)."""

BUILTIN_TARGETS: Final[tuple[BuiltinTarget, ...]] = (
    BuiltinTarget("accelerator", "cpu", "trainspec.reference.accelerators.cpu:CPUAccelerator"),
    *(
        BuiltinTarget("precision", flag, f"trainspec.reference.precisions:{cls}", caps)
        for flag, cls, caps in _PRECISIONS
    ),
    BuiltinTarget(
        "checkpoint_io",
        "torch",
        "trainspec.reference.checkpoint_io.torch_io:TorchCheckpointIO",
        capabilities=_TORCH_FORMAT | {"local_paths"},
        option_refs={"trusted_factory": f"{_HERE}:trusted_torch_io"},
        optional_capabilities={"fsspec_urls": "fsspec"},
    ),
    BuiltinTarget(
        "checkpoint_io",
        "async",
        "trainspec.reference.checkpoint_io.background:BackgroundCheckpointIO",
        capabilities=_TORCH_FORMAT | {"local_paths", "async"},
        option_refs={"trusted_factory": f"{_HERE}:trusted_background_io"},
        optional_capabilities={"fsspec_urls": "fsspec"},
    ),
    BuiltinTarget(
        "checkpoint_io",
        "memory",
        "trainspec.reference.checkpoint_io.memory:MemoryCheckpointIO",
        capabilities=_TORCH_FORMAT,  # no trusted_factory: a second instance has its own store
    ),
    BuiltinTarget(
        "checkpoint_io",
        "safetensors",
        "trainspec.reference.checkpoint_io.safetensors_io:SafetensorsCheckpointIO",
        capabilities=frozenset({"local_paths"}),
        option_refs={"dtypes": "trainspec.reference.checkpoint_io.safetensors_io:SUPPORTED_DTYPES"},
        optional_capabilities={"fsspec_urls": "fsspec"},
    ),
    BuiltinTarget(
        "collective", "single", "trainspec.reference.collectives.single:SingleProcessCollective"
    ),
    BuiltinTarget(
        "cluster_environment", "local", "trainspec.reference.environments.local:LocalEnvironment"
    ),
    BuiltinTarget(
        "launcher",
        "spawn",
        f"{_HERE}:spawn_launcher",
        capabilities=frozenset({"multi_process"}),
        options={"num_processes": 2},
    ),
    BuiltinTarget(
        "strategy",
        "single_device",
        "trainspec.reference.strategies.single_device:SingleDeviceStrategy",
        capabilities=frozenset({"backward_sync"}),
    ),
    BuiltinTarget(
        "collective",
        "torch (2 gloo ranks)",
        "trainspec.reference.collectives.torch_dist:TorchCollective",
        world_size=2,
    ),
    BuiltinTarget(
        "strategy",
        "ddp (2 gloo ranks)",
        f"{_HERE}:ddp_strategy_for_this_world",
        capabilities=frozenset({"backward_sync", "data_parallel"}),
        world_size=2,
    ),
)
"""Every built-in target, in the order ``trainspec verify`` runs them."""


def builtin_targets(kind: str | None = None) -> list[BuiltinTarget]:
    """The built-in targets, optionally only those of ``kind``."""
    return [t for t in BUILTIN_TARGETS if kind is None or t.kind == kind]
