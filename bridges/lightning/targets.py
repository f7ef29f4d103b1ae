"""Ready conformance targets: Lightning 2.6's CPU built-in plugins, through the bridge.

Each module attribute is a :class:`trainspec.conformance.Target` (factory, capabilities and
options included), so the kit takes it as it is::

    trainspec verify checkpoint_io trainspec.bridges.lightning.targets:torch_checkpoint_io
    trainspec verify strategy trainspec.bridges.lightning.targets:ddp_strategy --world-size 2

and so do the pytest suites (``target = targets.torch_checkpoint_io``) and
``trainspec.conformance.verify(targets.torch_checkpoint_io)``. :data:`TARGETS` lists them all
with the world size each runs on; ``scripts/lightning_compat.py`` verifies every one and
writes ``docs/bridges/lightning-compatibility.md``.

Capabilities are declared only where the Lightning plugin backs them (see the comment at each
target); a factory builds the plugin as Lightning's connectors would, and calls what they call
(including ``_set_world_ranks``, which Fabric's connector calls: Lightning has no public way).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

import torch
from lightning.fabric.plugins import Precision as LightningPrecision
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.plugins.collectives import TorchCollective
from lightning.fabric.plugins.environments.lightning import LightningEnvironment
from lightning.fabric.plugins.environments.slurm import SLURMEnvironment
from lightning.fabric.plugins.environments.torchelastic import TorchElasticEnvironment
from lightning.fabric.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision
from lightning.fabric.strategies.ddp import DDPStrategy
from lightning.fabric.strategies.single_device import SingleDeviceStrategy
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from trainspec.bridges.lightning._mapping import translating
from trainspec.bridges.lightning.from_lightning import (
    from_lightning_accelerator,
    from_lightning_checkpoint_io,
    from_lightning_cluster_environment,
    from_lightning_collective,
    from_lightning_precision,
    from_lightning_strategy,
)
from trainspec.conformance._helpers import importable_path
from trainspec.conformance.core import CheckSkipped, Kind, Target
from trainspec.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment

__all__ = [
    "TARGETS",
    "LightningFactory",
    "LightningTarget",
    "accelerator_cpu",
    "async_checkpoint_io",
    "ddp_strategy",
    "lightning_environment",
    "lightning_factories",
    "lightning_target",
    "precision_16_mixed",
    "precision_16_true",
    "precision_32_true",
    "precision_64_true",
    "precision_bf16_mixed",
    "precision_bf16_true",
    "single_device_strategy",
    "slurm_environment",
    "torch_checkpoint_io",
    "torch_collective",
    "torchelastic_environment",
    "trusted_async_checkpoint_io",
    "trusted_torch_checkpoint_io",
]

_CPU: Final = torch.device("cpu")

_WRAPPERS: Final[dict[str, Callable[[Any], object]]] = {
    "accelerator": from_lightning_accelerator,
    "precision": from_lightning_precision,
    "checkpoint_io": from_lightning_checkpoint_io,
    "cluster_environment": from_lightning_cluster_environment,
    "strategy": from_lightning_strategy,
    "collective": from_lightning_collective,
}


class LightningFactory:
    """The factory of a :func:`lightning_target`: each call makes a plugin with the Lightning
    factory and wraps it with the ``from_lightning_*`` call of :attr:`kind`.

    Importable by name, as the kit needs for the CKPT-3 kill check and the distributed
    harness (a fresh process rebuilds the plugin) and for runnable failure snippets:

    - when the Lightning factory is itself importable (a module-level class or function), as
      ``trainspec.bridges.lightning.targets:lightning_factories.KIND.MODULE.QUALNAME`` (see
      :data:`lightning_factories`);
    - otherwise (a lambda, a ``functools.partial``) as the module attribute that holds its
      target, found when asked: ``"s3_io.factory"`` for ``s3_io = lightning_target(...)`` in
      the module that called :func:`lightning_target`. Where nothing holds it, it has no
      ``__qualname__`` and the kit treats it as not importable.
    """

    def __init__(
        self, kind: Kind, factory: Callable[[], object], wrap: Callable[[Any], object], home: str
    ) -> None:
        self.kind: Final = kind
        self.lightning_factory: Final = factory
        self._wrap = wrap
        self.__module__ = home

    def __call__(self) -> object:
        return self._wrap(self.lightning_factory())

    def __getattr__(self, name: str) -> str:
        # Only reached for names not found the ordinary way: instances have no __qualname__
        # of their own, so it is computed here (after the module finished importing).
        if name == "__qualname__":
            found = self._qualname()
            if found is not None:
                return found
        raise AttributeError(name)

    def _qualname(self) -> str | None:
        home = self.__dict__.get("__module__", "")
        if home == __name__ and _FACTORIES.get(self._key()) is self:
            module, qualname = self._key()[1:]
            return f"lightning_factories.{self.kind}.{module}.{qualname}"
        holder = sys.modules.get(home)
        for attribute, value in list(vars(holder).items()) if holder is not None else ():
            if value is self:
                return attribute
            if isinstance(value, Target) and value.factory is self:
                return f"{attribute}.factory"
        return None

    def _key(self) -> tuple[str, str, str]:
        module, qualname = importable_path(self.lightning_factory) or ("", "")
        return (self.kind, module, qualname)

    def __repr__(self) -> str:
        inner = getattr(self.lightning_factory, "__qualname__", None) or repr(
            self.lightning_factory
        )
        return f"LightningFactory({self.kind!r}, {inner})"


_FACTORIES: Final[dict[tuple[str, str, str], LightningFactory]] = {}
"""(kind, module, qualname) of an importable Lightning factory -> its one LightningFactory."""


def _factory(kind: Kind, factory: Callable[[], object], home: str) -> LightningFactory:
    wrap = _WRAPPERS[kind]
    path = importable_path(factory)
    if path is None:
        return LightningFactory(kind, factory, wrap, home)
    key = (kind, path[0], path[1])
    if key not in _FACTORIES:
        _FACTORIES[key] = LightningFactory(kind, factory, wrap, __name__)
    return _FACTORIES[key]


class _FactoryNamespace:
    """One step of ``lightning_factories.KIND.MODULE.QUALNAME``: each attribute adds a name;
    the step whose names end in an importable Lightning factory is its LightningFactory."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        self._parts = parts

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        parts = (*self._parts, name)
        kind = parts[0]
        if kind not in _WRAPPERS:
            raise AttributeError(f"no Lightning bridge for kind {kind!r}")
        for split in range(2, len(parts)):
            module, qualname = ".".join(parts[1:split]), ".".join(parts[split:])
            found = _FACTORIES.get((kind, module, qualname))
            if found is None:
                target = _imported(module, qualname)
                if target is not None:
                    found = _factory(cast("Kind", kind), target, __name__)
            if found is not None:
                return found
        return _FactoryNamespace(parts)

    def __repr__(self) -> str:
        return f"lightning_factories.{'.'.join(self._parts)}"


def _imported(module: str, qualname: str) -> Callable[[], object] | None:
    """``module:qualname`` when it imports to a callable found under that very path."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
        found: object = importlib.import_module(module)
    except (ImportError, ValueError):  # not a module (a class, a missing package)
        return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if callable(found) and importable_path(found) == (module, qualname):
        return cast("Callable[[], object]", found)
    return None


lightning_factories: Final = _FactoryNamespace(())
"""``lightning_factories.KIND.MODULE.QUALNAME`` is the :class:`LightningFactory` of the
importable Lightning factory ``MODULE:QUALNAME`` for ``KIND``: the import path, in any
process, of what ``lightning_target(KIND, factory)`` (and ``trainspec verify KIND TARGET
--lightning``) verifies, for example
``lightning_factories.collective.lightning.fabric.plugins.collectives.torch_collective.TorchCollective``."""


def lightning_target(
    kind: Kind,
    factory: Callable[[], object],
    *,
    name: str = "",
    capabilities: Iterable[str] = (),
    expected_failures: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
) -> Target[object]:
    """A conformance :class:`~trainspec.conformance.Target` for a *Lightning* plugin factory:
    every instance ``factory()`` makes is wrapped with the ``from_lightning_*`` call of
    ``kind``. Put it in a module and the kit takes it as it is::

        s3_io = lightning_target("checkpoint_io", S3CheckpointIO, capabilities={"fsspec_urls"})
        # trainspec verify checkpoint_io my_plugin.conformance:s3_io

    The target's factory is a :class:`LightningFactory`, importable as
    ``my_plugin.conformance:s3_io.factory`` once the module holds the target, so the kit's
    checks that rebuild the plugin in a fresh process (the CKPT-3 kill check) run and failure
    snippets import it. A ``kind`` without a bridge (``launcher``) raises
    :class:`~trainspec.ConfigurationError` naming the kinds that have one.
    """
    wrap = _WRAPPERS.get(kind)
    if wrap is None:
        raise ConfigurationError(
            f"no Lightning bridge for kind {kind!r}; bridged kinds: {', '.join(_WRAPPERS)}"
        )
    if not callable(factory):
        raise ConfigurationError(
            f"factory must be a zero-argument callable returning a Lightning plugin; got "
            f"{type(factory).__name__}"
        )
    label = name or f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"
    caller = sys._getframe(1).f_globals.get("__name__")  # the module that called us
    return Target(
        kind=kind,
        factory=_factory(kind, factory, caller if isinstance(caller, str) else ""),
        name=label,
        capabilities=frozenset(capabilities),
        expected_failures=dict(expected_failures or {}),
        options=dict(options or {}),
    )


# -- Accelerator ----------------------------------------------------------------------------------

accelerator_cpu: Final = lightning_target(
    "accelerator", CPUAccelerator, name="lightning CPUAccelerator"
)

# -- Precision ------------------------------------------------------------------------------------


precision_32_true: Final = lightning_target(
    "precision", LightningPrecision, name="lightning Precision (32-true)"
)
precision_64_true: Final = lightning_target(
    "precision", DoublePrecision, name="lightning DoublePrecision"
)
precision_16_true: Final = lightning_target(
    "precision", partial(HalfPrecision, "16-true"), name="lightning HalfPrecision (16-true)"
)
precision_bf16_true: Final = lightning_target(
    "precision", partial(HalfPrecision, "bf16-true"), name="lightning HalfPrecision (bf16-true)"
)
precision_bf16_mixed: Final = lightning_target(
    "precision",
    partial(MixedPrecision, "bf16-mixed", "cpu"),
    name="lightning MixedPrecision (bf16-mixed, cpu)",
    capabilities={"autocast"},
)
# Lightning's connectors never pick this on CPU (they switch to bf16-mixed with a warning);
# the class itself accepts it and scales with torch.amp.GradScaler("cpu").
precision_16_mixed: Final = lightning_target(
    "precision",
    partial(MixedPrecision, "16-mixed", "cpu"),
    name="lightning MixedPrecision (16-mixed, cpu)",
    capabilities={"autocast", "gradient_scaling"},
)

# -- CheckpointIO ---------------------------------------------------------------------------------

# torch.save's format, local paths and fsspec URLs (Lightning's get_filesystem). Lightning's
# AsyncCheckpointIO has no wait(), so "async" is not declared for it.
_TORCH_FORMAT: Final = frozenset(
    {"python_objects", "strided_tensors", "shared_storage", "pickle", "local_paths", "fsspec_urls"}
)


def _async_torch_io() -> AsyncCheckpointIO:
    return AsyncCheckpointIO(TorchCheckpointIO())


def trusted_torch_checkpoint_io() -> CheckpointIO:
    """The bridged ``TorchCheckpointIO`` with full unpickling (``weights_only=False``), the
    kit's ``trusted_factory`` option."""
    return from_lightning_checkpoint_io(TorchCheckpointIO(), weights_only=False)


def trusted_async_checkpoint_io() -> CheckpointIO:
    """The bridged ``AsyncCheckpointIO(TorchCheckpointIO())`` with full unpickling."""
    return from_lightning_checkpoint_io(_async_torch_io(), weights_only=False)


torch_checkpoint_io: Final = lightning_target(
    "checkpoint_io",
    TorchCheckpointIO,
    name="lightning TorchCheckpointIO",
    capabilities=_TORCH_FORMAT,
    options={"trusted_factory": trusted_torch_checkpoint_io},
)
async_checkpoint_io: Final = lightning_target(
    "checkpoint_io",
    _async_torch_io,
    name="lightning AsyncCheckpointIO(TorchCheckpointIO)",
    capabilities=_TORCH_FORMAT,
    options={"trusted_factory": trusted_async_checkpoint_io},
)

# -- ClusterEnvironment ---------------------------------------------------------------------------


def _int_or_skip(description: Mapping[str, str], key: str) -> int:
    try:
        return int(description[key])
    except ValueError as error:
        raise CheckSkipped(
            f"LightningEnvironment takes {key} from Fabric's connector as an int "
            f"(set_{key}); {description[key]!r} cannot be expressed"
        ) from error


def _lightning_env(description: Mapping[str, str]) -> ClusterEnvironment:
    os.environ["MASTER_ADDR"] = description["main_address"]
    os.environ["MASTER_PORT"] = description["main_port"]
    os.environ["LOCAL_RANK"] = description["local_rank"]
    os.environ["NODE_RANK"] = description["node_rank"]
    environment = LightningEnvironment()
    environment.set_world_size(_int_or_skip(description, "world_size"))
    environment.set_global_rank(_int_or_skip(description, "global_rank"))
    return from_lightning_cluster_environment(environment)


def _torchelastic_env(description: Mapping[str, str]) -> ClusterEnvironment:
    os.environ.update(
        {
            "TORCHELASTIC_RUN_ID": "trainspec",
            "MASTER_ADDR": description["main_address"],
            "MASTER_PORT": description["main_port"],
            "WORLD_SIZE": description["world_size"],
            "RANK": description["global_rank"],
            "LOCAL_RANK": description["local_rank"],
            "GROUP_RANK": description["node_rank"],
        }
    )
    return from_lightning_cluster_environment(TorchElasticEnvironment())


def _slurm_env(description: Mapping[str, str]) -> ClusterEnvironment:
    os.environ.update(
        {
            "SLURM_NTASKS": description["world_size"],
            "SLURM_NTASKS_PER_NODE": description["world_size"],
            "SLURM_PROCID": description["global_rank"],
            "SLURM_LOCALID": description["local_rank"],
            "SLURM_NODEID": description["node_rank"],
            "MASTER_ADDR": description["main_address"],
            "MASTER_PORT": description["main_port"],
            "SLURM_JOB_ID": "1234",
            "SLURM_JOB_NAME": "train",
        }
    )
    return from_lightning_cluster_environment(
        translating(
            "config",
            "SLURMEnvironment()",
            lambda: SLURMEnvironment(auto_requeue=False),
        )
    )


lightning_environment: Final = lightning_target(
    "cluster_environment",
    LightningEnvironment,
    name="lightning LightningEnvironment",
    capabilities={"configurable"},
    options={"env_factory": _lightning_env},
)
torchelastic_environment: Final = lightning_target(
    "cluster_environment",
    TorchElasticEnvironment,
    name="lightning TorchElasticEnvironment",
    capabilities={"configurable"},
    options={"env_factory": _torchelastic_env},
)
slurm_environment: Final = lightning_target(
    "cluster_environment",
    partial(SLURMEnvironment, auto_requeue=False),
    name="lightning SLURMEnvironment",
    capabilities={"configurable"},
    options={"env_factory": _slurm_env},
)

# -- Strategy and Collective -----------------------------------------------------------------------


def _single_device() -> object:
    return from_lightning_strategy(
        SingleDeviceStrategy(
            device=_CPU,
            accelerator=CPUAccelerator(),
            precision=LightningPrecision(),
            checkpoint_io=TorchCheckpointIO(),
        )
    )


def _ddp() -> object:
    # Fabric(devices=N, num_nodes=M) as torchrun (and the kit's harness) describe it: N from
    # LOCAL_WORLD_SIZE, M from GROUP_WORLD_SIZE or WORLD_SIZE / N. Not WORLD_SIZE alone:
    # LightningEnvironment.teardown deletes it from os.environ (lightning/fabric/plugins/
    # environments/lightning.py), so a second instance in the same process (E2E-2) would see a
    # world of one and wait for a rank that never comes.
    devices = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or "1")
    nodes = os.environ.get("GROUP_WORLD_SIZE") or str(
        max(1, int(os.environ.get("WORLD_SIZE") or devices) // devices)
    )
    strategy = DDPStrategy(
        accelerator=CPUAccelerator(),
        parallel_devices=[_CPU] * devices,
        cluster_environment=LightningEnvironment(),
        checkpoint_io=TorchCheckpointIO(),
        precision=LightningPrecision(),
        process_group_backend="gloo",
    )
    strategy.num_nodes = int(nodes)  # what Fabric's connector sets (_lazy_init_strategy)
    strategy._set_world_ranks()  # what Fabric's connector calls (_lazy_init_strategy)
    return from_lightning_strategy(strategy)


single_device_strategy: Final = Target(
    kind="strategy", factory=_single_device, name="lightning SingleDeviceStrategy (cpu)"
)
# DDP's no_backward_sync (Lightning's _DDPBackwardSyncControl) backs "backward_sync".
ddp_strategy: Final = Target(
    kind="strategy",
    factory=_ddp,
    name="lightning DDPStrategy (gloo)",
    capabilities=frozenset({"backward_sync", "data_parallel"}),
)
torch_collective: Final = lightning_target(
    "collective", TorchCollective, name="lightning TorchCollective (gloo)"
)


@dataclass(frozen=True)
class LightningTarget:
    """One row of :data:`TARGETS`: the attribute name, its target, and the world size it runs
    on (``None``: in one process)."""

    attribute: str
    target: Target[object]
    world_size: int | None = None

    @property
    def kind(self) -> Kind:
        return self.target.kind


TARGETS: Final[tuple[LightningTarget, ...]] = (
    LightningTarget("accelerator_cpu", accelerator_cpu),
    LightningTarget("precision_32_true", precision_32_true),
    LightningTarget("precision_64_true", precision_64_true),
    LightningTarget("precision_16_true", precision_16_true),
    LightningTarget("precision_bf16_true", precision_bf16_true),
    LightningTarget("precision_bf16_mixed", precision_bf16_mixed),
    LightningTarget("precision_16_mixed", precision_16_mixed),
    LightningTarget("torch_checkpoint_io", torch_checkpoint_io),
    LightningTarget("async_checkpoint_io", async_checkpoint_io),
    LightningTarget("lightning_environment", lightning_environment),
    LightningTarget("torchelastic_environment", torchelastic_environment),
    LightningTarget("slurm_environment", slurm_environment),
    LightningTarget("single_device_strategy", single_device_strategy),
    LightningTarget("ddp_strategy", ddp_strategy, world_size=2),
    LightningTarget("torch_collective", torch_collective, world_size=2),
)
"""Every Lightning 2.6 CPU built-in the compatibility report verifies, in report order."""
