"""``DDPStrategy``: data-parallel training with ``DistributedDataParallel`` over c10d.

Each rank holds a full replica of the module; ``DistributedDataParallel`` averages gradients
across ranks during ``backward``, so N ranks with batch B each train like one rank with the
N*B batch (E2E-1). Collectives go through :class:`~trainspec.reference.collectives.
TorchCollective` (gloo on CPU, NCCL on CUDA) with the same defaults as the single-device
strategy (``"mean"``, a 30-minute timeout).

Typical use (the same script works under ``torchrun``, which starts the ranks itself)::

    strategy = DDPStrategy(parallel_devices=[torch.device("cpu")] * 2)

    def train() -> None:
        strategy.setup_environment()
        ...

    if strategy.launcher is not None:
        strategy.launcher.launch(train)
    else:
        train()
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sized
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar, Final, Literal, TypeVar, get_args

from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)
from torch.utils.data.distributed import DistributedSampler

from trainspec.capabilities import BackwardSyncControl
from trainspec.errors import ConfigurationError, UnsupportedError
from trainspec.reference._messages import describe_value
from trainspec.reference.cluster_environments.detection import detect_environment
from trainspec.reference.collectives.torch_dist import TorchCollective
from trainspec.reference.launchers.spawn import MultiprocessingLauncher
from trainspec.reference.launchers.subprocess_script import SubprocessScriptLauncher
from trainspec.reference.strategies.base import StrategyBase

if TYPE_CHECKING:
    import torch

    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.launcher import Launcher
    from trainspec.precision import Precision

__all__ = ["DDPStartMethod", "DDPStrategy", "distributed_dataloader"]

_T = TypeVar("_T")

DDPStartMethod = Literal["subprocess", "spawn", "forkserver", "fork"]
"""How :class:`DDPStrategy` starts its ranks when no scheduler did: ``"subprocess"`` re-runs
the script (:class:`~trainspec.reference.launchers.SubprocessScriptLauncher`); the others are
:class:`~trainspec.reference.launchers.MultiprocessingLauncher` start methods (notebooks)."""

_START_METHODS: Final[tuple[str, ...]] = get_args(DDPStartMethod)
_NAME: Final = "DDPStrategy"
# torch 2.13 renamed DDP's broadcast_buffers to forward_sync_buffers (the old name warns).
_HAS_FORWARD_SYNC_BUFFERS: Final = (
    "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
)


class DDPStrategy(StrategyBase, BackwardSyncControl):
    """One process per device, a full module replica each, gradients averaged by
    ``DistributedDataParallel`` (STRAT-1 ... STRAT-17, SYNC-1).

    - **Ranks**: ``len(parallel_devices)`` per node, times ``num_nodes``. The cluster
      environment defaults to :func:`~trainspec.reference.cluster_environments.detect_environment`
      (torchrun, then SLURM, then the local machine).
    - **Launcher**: ``None`` when the environment creates the processes (torchrun, srun);
      otherwise a :class:`~trainspec.reference.launchers.SubprocessScriptLauncher`
      (``start_method="subprocess"``, the default) or a
      :class:`~trainspec.reference.launchers.MultiprocessingLauncher` with the given start
      method. The local launchers start the ranks of one machine: ``num_nodes > 1`` needs an
      environment that creates the processes.
    - **Modules**: wrapped in ``DistributedDataParallel`` (``device_ids`` only for CUDA);
      :meth:`module_state_dict` and :meth:`load_module_state_dict` use the inner module, so
      keys carry no ``module.`` prefix and checkpoints move to and from single-device
      training (E2E-3).
    - **Data**: :meth:`process_dataloader` rebuilds the loader around a
      ``DistributedSampler``; the trainer **should** call ``loader.sampler.set_epoch(epoch)``
      each epoch for a new shuffle.
    - **Gradient accumulation**: :meth:`no_backward_sync` is DDP's ``no_sync``.
    - **Clipping**: after ``backward`` every rank holds the same, averaged gradients, so the
      norm the base computes locally is the global norm (STRAT-11). Clipping inside
      :meth:`no_backward_sync` sees this rank's unsynchronised gradients.

    ``setup_environment`` raises :class:`~trainspec.ConfigurationError` when the
    environment's world size is not ``len(parallel_devices) * num_nodes`` (typically: the
    function was not started through :attr:`launcher`).
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"data_parallel"})
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""

    def __init__(
        self,
        *,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        num_nodes: int = 1,
        start_method: DDPStartMethod = "subprocess",
        backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        sampler_seed: int = 0,
        find_unused_parameters: bool = False,
        sync_buffers: bool = True,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
    ) -> None:
        """The standard keyword arguments (see :class:`StrategyBase`) plus:

        ``start_method`` (see :data:`DDPStartMethod`); ``backend`` and ``timeout`` for the
        :class:`~trainspec.reference.collectives.TorchCollective` (the default timeout of
        every collective); ``sampler_seed`` for the ``DistributedSampler``;
        ``find_unused_parameters``, ``static_graph`` and ``gradient_as_bucket_view`` passed to
        ``DistributedDataParallel``, and ``sync_buffers`` (copy rank 0's buffers to every
        rank before each forward: DDP's ``forward_sync_buffers``, ``broadcast_buffers`` in
        torch releases before it). Bad values raise
        :class:`~trainspec.ConfigurationError`.
        """
        if start_method not in _START_METHODS:
            raise ConfigurationError(
                f"{_NAME}: start_method must be one of {list(_START_METHODS)}; "
                f"got {start_method!r}."
            )
        if isinstance(sampler_seed, bool) or not isinstance(sampler_seed, int):
            raise ConfigurationError(f"{_NAME}: sampler_seed must be an int; got {sampler_seed!r}.")
        flags = {
            "find_unused_parameters": find_unused_parameters,
            "sync_buffers": sync_buffers,
            "static_graph": static_graph,
            "gradient_as_bucket_view": gradient_as_bucket_view,
        }
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise ConfigurationError(f"{_NAME}: {name} must be a bool; got {value!r}.")
        super().__init__(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            num_nodes=num_nodes,
            collective=TorchCollective(backend=backend, timeout=timeout),
        )
        if num_nodes > 1 and not self.cluster_environment.creates_processes_externally:
            raise ConfigurationError(
                f"{_NAME}: num_nodes={describe_value(num_nodes)} needs ranks started on every "
                "node by torchrun or srun; the local launchers start the ranks of one machine only "
                f"(cluster environment: {self.cluster_environment!r}); on one machine use "
                "strategy 'ddp' with num_nodes=1."
            )
        self._start_method: DDPStartMethod = start_method
        self._sampler_seed = sampler_seed
        self._find_unused_parameters = find_unused_parameters
        self._sync_buffers = sync_buffers
        self._static_graph = static_graph
        self._gradient_as_bucket_view = gradient_as_bucket_view
        self._local_launcher: Launcher | None = None
        self._wrappers: list[weakref.ref[DistributedDataParallel]] = []

    def default_cluster_environment(self) -> ClusterEnvironment:
        """The detected environment: torchrun, then SLURM, then the local machine."""
        return detect_environment()

    # -- ranks and launcher ----------------------------------------------------------------

    @property
    def num_processes(self) -> int:
        """Ranks per node: ``len(parallel_devices)``."""
        return len(self.parallel_devices)

    @property
    def start_method(self) -> DDPStartMethod:
        """How the local launcher starts ranks (see :data:`DDPStartMethod`)."""
        return self._start_method

    @property
    def launcher(self) -> Launcher | None:
        """``None`` when the environment creates the processes; otherwise the local launcher
        for :attr:`num_processes` ranks, created once (STRAT-1)."""
        if self.cluster_environment.creates_processes_externally:
            return None
        if self._local_launcher is None:
            if self._start_method == "subprocess":
                self._local_launcher = SubprocessScriptLauncher(
                    self.num_processes, cluster_environment=self.cluster_environment
                )
            else:
                self._local_launcher = MultiprocessingLauncher(
                    self.num_processes,
                    self._start_method,
                    cluster_environment=self.cluster_environment,
                )
        return self._local_launcher

    # -- lifecycle ---------------------------------------------------------------------------

    def setup_environment(self) -> None:
        """Check the environment describes ``len(parallel_devices) * num_nodes`` ranks, then
        set up the device, the process group and the precision (STRAT-3)."""
        if self.lifecycle_state != "set_up":
            environment = self.cluster_environment
            expected = self.num_processes * self.num_nodes
            actual = environment.world_size
            if actual != expected:
                hint = (
                    "start it with torchrun/srun using that many processes"
                    if environment.creates_processes_externally
                    else "run the training function through strategy.launcher.launch(...)"
                )
                raise ConfigurationError(
                    f"{_NAME}: the cluster environment describes {actual} rank(s), but this "
                    f"strategy trains on {self.num_processes} device(s) per node x "
                    f"{self.num_nodes} node(s) = {expected} rank(s); {hint}."
                )
        super().setup_environment()

    # -- modules -----------------------------------------------------------------------------

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``DistributedDataParallel(module)``; ``device_ids=[root_device.index]`` on CUDA.
        A module without trainable parameters raises :class:`~trainspec.ConfigurationError`."""
        device = self.root_device
        device_ids = [device.index] if device.type == "cuda" and device.index is not None else None
        wrapper = self._wrap(module, device_ids)
        self._wrappers.append(weakref.ref(wrapper))
        return wrapper

    def _wrap(
        self, module: torch.nn.Module, device_ids: list[int] | None
    ) -> DistributedDataParallel:
        try:
            if _HAS_FORWARD_SYNC_BUFFERS:
                return DistributedDataParallel(
                    module,
                    device_ids=device_ids,
                    find_unused_parameters=self._find_unused_parameters,
                    forward_sync_buffers=self._sync_buffers,
                    static_graph=self._static_graph,
                    gradient_as_bucket_view=self._gradient_as_bucket_view,
                )
            return DistributedDataParallel(
                module,
                device_ids=device_ids,
                find_unused_parameters=self._find_unused_parameters,
                broadcast_buffers=self._sync_buffers,
                static_graph=self._static_graph,
                gradient_as_bucket_view=self._gradient_as_bucket_view,
            )
        except (RuntimeError, ValueError) as error:
            if not any(parameter.requires_grad for parameter in module.parameters()):
                raise ConfigurationError(
                    f"{_NAME}.setup_module: the module has no parameter that requires a "
                    "gradient; DistributedDataParallel needs at least one."
                ) from error
            raise

    def teardown(self) -> None:
        """Release every ``DistributedDataParallel`` wrapper's reducer, then tear down as the
        base does (STRAT-4).

        A wrapper collected *after* the process group is destroyed would drop the group's
        last reference from its reducer's destructor with the GIL held, while a gloo worker
        thread waits for the GIL to free a finished work: torch 2.13 deadlocks. Releasing the
        reducers first makes the wrappers' later collection harmless. After teardown a wrapper
        returned by :meth:`setup_module` can no longer run forward; its ``module`` attribute
        (the unwrapped module) stays usable.
        """
        wrappers, self._wrappers = self._wrappers, []
        for ref in wrappers:
            wrapper = ref()
            if wrapper is not None:
                for name in ("logger", "reducer"):
                    vars(wrapper).pop(name, None)
        super().teardown()

    def __getstate__(self) -> dict[str, object]:
        # Launchers pickle the strategy; the wrappers of this process do not travel.
        state = dict(self.__dict__)
        state["_wrappers"] = []
        return state

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module inside ``DistributedDataParallel``; any other module unchanged."""
        if isinstance(module, DistributedDataParallel):
            inner: torch.nn.Module = module.module
            return inner
        return module

    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """DDP's ``no_sync()`` on ``module`` (a module from :meth:`setup_module`) when
        ``enabled``; a no-op context otherwise (SYNC-1)."""
        self.require_set_up("no_backward_sync")
        if not enabled:
            return nullcontext()
        if not isinstance(module, DistributedDataParallel):
            raise ConfigurationError(
                f"{_NAME}.no_backward_sync: module must be the module returned by "
                f"setup_module (a DistributedDataParallel); got {type(module).__name__}."
            )
        return module.no_sync()

    # -- data ----------------------------------------------------------------------------------

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        """A loader over the same dataset with a ``DistributedSampler`` for this rank
        (STRAT-8).

        Shuffling follows the original sampler (``RandomSampler`` shuffles, with
        ``sampler_seed``; ``SequentialSampler`` does not); batch size, ``drop_last``,
        workers, collate function and the other loader options are kept. The sampler pads
        the dataset by repetition to a multiple of the world size, so the shares are disjoint
        up to that padding and together cover every sample. A loader whose sampler already is
        a ``DistributedSampler`` is returned unchanged. Iterable datasets, custom samplers
        and custom batch samplers raise :class:`~trainspec.UnsupportedError`: shard those in
        the dataset or sampler itself.
        """
        self.require_set_up("process_dataloader")
        return distributed_dataloader(
            dataloader,
            num_replicas=self.world_size,
            rank=self.global_rank,
            seed=self._sampler_seed,
            owner=f"{_NAME}.process_dataloader",
        )


def distributed_dataloader(
    dataloader: DataLoader[_T], *, num_replicas: int, rank: int, seed: int, owner: str
) -> DataLoader[_T]:
    """``dataloader`` rebuilt around a ``DistributedSampler`` for ``rank`` of
    ``num_replicas`` (see :meth:`DDPStrategy.process_dataloader` for the rules); ``owner``
    names the caller in error messages."""
    sampler = dataloader.sampler
    if isinstance(sampler, DistributedSampler):
        return dataloader
    dataset = dataloader.dataset
    if isinstance(dataset, IterableDataset):
        raise UnsupportedError(
            f"{owner}: an IterableDataset cannot be split by a sampler; shard it inside the "
            "dataset (by the strategy's global_rank and world_size)."
        )
    batch_sampler = dataloader.batch_sampler
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        raise UnsupportedError(
            f"{owner}: custom batch sampler {type(batch_sampler).__name__} is not supported; "
            "give it a DistributedSampler yourself."
        )
    if type(sampler) is RandomSampler:
        if sampler.replacement or sampler.num_samples != len(_sized(dataset, owner)):
            raise UnsupportedError(
                f"{owner}: a RandomSampler with replacement or num_samples is not supported; "
                "use a DistributedSampler yourself."
            )
        shuffle = True
    elif type(sampler) is SequentialSampler:
        shuffle = False
    else:
        raise UnsupportedError(
            f"{owner}: custom sampler {type(sampler).__name__} is not supported (only "
            "RandomSampler and SequentialSampler); give the loader a DistributedSampler "
            "yourself."
        )
    distributed: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False
    )
    return DataLoader(
        dataset,
        batch_size=dataloader.batch_size,
        sampler=distributed,
        num_workers=dataloader.num_workers,
        collate_fn=dataloader.collate_fn,
        pin_memory=dataloader.pin_memory,
        drop_last=dataloader.drop_last,
        timeout=dataloader.timeout,
        worker_init_fn=dataloader.worker_init_fn,
        multiprocessing_context=dataloader.multiprocessing_context,
        generator=dataloader.generator,
        prefetch_factor=dataloader.prefetch_factor,
        persistent_workers=dataloader.persistent_workers,
        pin_memory_device=dataloader.pin_memory_device,
    )


def _sized(dataset: object, owner: str) -> Sized:
    if not isinstance(dataset, Sized):
        raise UnsupportedError(
            f"{owner}: the dataset must have a length; {type(dataset).__name__} has none."
        )
    return dataset
