"""``StrategyBase``: the shared implementation behind the reference strategies.

A concrete strategy subclasses :class:`StrategyBase` and gets the whole
:class:`trainspec.Strategy` contract except :meth:`~trainspec.Strategy.process_dataloader`.
What a subclass **must** provide, and what it **may** override, is listed in the class
docstring; everything else is final in spirit (override only with a ``super()`` call).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

import torch

from trainspec.accelerator import Accelerator
from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.collective import Collective
from trainspec.errors import (
    CheckpointWriteError,
    ConfigurationError,
    LifecycleError,
)
from trainspec.launcher import Launcher
from trainspec.precision import Precision
from trainspec.reference._containers import map_tensors
from trainspec.reference._messages import describe_value
from trainspec.strategy import Strategy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from datetime import timedelta

    from trainspec.types import Checkpoint, PathLike, ReduceOp, StateDict, StorageOptions

__all__ = ["LifecycleState", "StrategyBase"]

_T = TypeVar("_T")

LifecycleState = Literal["not_set_up", "set_up", "torn_down"]
"""Where a :class:`StrategyBase` is in its lifecycle (see :attr:`StrategyBase.lifecycle_state`)."""

# Device types whose host-to-device copies are synchronous anyway, or for which non-blocking
# copies are unsafe to read back without a synchronisation the trainer does not do.
_BLOCKING_DEVICE_TYPES: Final = frozenset({"cpu", "mps"})


class StrategyBase(Strategy):
    """Owns the components and a :class:`~trainspec.Collective`; implements the lifecycle,
    precision delegation, device transfer, rank-zero checkpoint writes and the collectives.

    Lifecycle (STRAT-3, STRAT-4)::

        not_set_up --setup_environment()--> set_up --teardown()--> torn_down
        torn_down  --setup_environment()--> set_up          (a strategy may be set up again)

    ``teardown()`` in ``not_set_up`` or ``torn_down`` is a no-op. Every training, checkpoint
    and collective method raises :class:`~trainspec.LifecycleError` (naming the method and the
    state) outside ``set_up``; so does ``setup_environment()`` while already ``set_up``.
    The components' own constructors run at strategy construction; nothing touches a device,
    a process group or a file before ``setup_environment()``.

    **A subclass must:**

    - call ``super().__init__(...)`` with the standard keyword arguments plus ``collective=``
      (the :class:`~trainspec.Collective` to delegate to) and, where it starts processes,
      ``launcher=``; or override the :attr:`launcher` property;
    - implement :meth:`process_dataloader` (STRAT-8); it is the only abstract member left;
    - start every step-3/4/5 method it adds or overrides with ``self.require_set_up(name)``
      (STRAT-3), unless it calls a base method that checks.

    **A subclass may override** (each is public and documented below):

    - ``default_accelerator()``, ``default_precision()``, ``default_checkpoint_io()``,
      ``default_cluster_environment()``, ``default_parallel_devices(accelerator)``: what
      ``None`` means for the constructor arguments. They run inside ``__init__`` in this
      order, **before** the subclass's own ``__init__`` body continues, so they must not read
      attributes the subclass sets after ``super().__init__``;
    - the rank properties :attr:`global_rank`, :attr:`local_rank`, :attr:`node_rank`,
      :attr:`world_size` (default: read from the cluster environment) and :attr:`root_device`
      (default: ``parallel_devices[local_rank]``). ``root_device`` is read once per
      ``setup_environment`` and cached for the hot path;
    - :meth:`wrap_module` / :meth:`unwrap_module`: the wrapper :meth:`setup_module` applies
      and its inverse, used by :meth:`module_state_dict`, :meth:`load_module_state_dict`
      (keys without a wrapper prefix, STRAT-14);
    - :meth:`setup_environment` and :meth:`teardown`: call ``super()``; the base runs the
      template ``accelerator.setup_device(root_device)`` → ``collective.setup(environment,
      root_device)`` → ``precision.setup(root_device)`` and undoes the steps that succeeded
      when a later one raises;
    - :meth:`setup_optimizer` (default: returns the optimizer unchanged) and
      :meth:`clip_gradients_norm` (default: unscale through the precision, then
      ``torch.nn.utils.clip_grad_norm_`` over the optimizer's parameters; correct whenever
      every rank holds full, synchronised gradients — sharded strategies must override to
      reduce the norm across ranks, STRAT-11).

    The hot path (:meth:`forward_context`, :meth:`backward`, :meth:`optimizer_step`,
    :meth:`batch_to_device`) performs one attribute check and then delegates; subclasses
    **should** keep it that way.

    Thread safety: none; a strategy is used by one thread of one rank.
    """

    def __init__(
        self,
        *,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        num_nodes: int = 1,
        collective: Collective,
        launcher: Launcher | None = None,
    ) -> None:
        """Store the components; ``None`` means the class's default (see the ``default_*``
        methods). Raises :class:`~trainspec.ConfigurationError` for a component of the wrong
        kind, a ``num_nodes`` that is not a positive int, or ``parallel_devices`` that are not
        a non-empty list of ``torch.device`` of the accelerator's type."""
        name = type(self).__name__
        if accelerator is None:
            accelerator = self.default_accelerator()
        if not isinstance(accelerator, Accelerator):
            raise _wrong_kind(name, "accelerator", "Accelerator", accelerator)
        if precision is None:
            precision = self.default_precision()
        if not isinstance(precision, Precision):
            raise _wrong_kind(name, "precision", "Precision", precision)
        if checkpoint_io is None:
            checkpoint_io = self.default_checkpoint_io()
        if not isinstance(checkpoint_io, CheckpointIO):
            raise _wrong_kind(name, "checkpoint_io", "CheckpointIO", checkpoint_io)
        if cluster_environment is None:
            cluster_environment = self.default_cluster_environment()
        if not isinstance(cluster_environment, ClusterEnvironment):
            raise _wrong_kind(
                name, "cluster_environment", "ClusterEnvironment", cluster_environment
            )
        if not isinstance(collective, Collective):
            raise _wrong_kind(name, "collective", "Collective", collective)
        if launcher is not None and not isinstance(launcher, Launcher):
            raise _wrong_kind(name, "launcher", "Launcher | None", launcher)
        self._accelerator: Accelerator = accelerator
        self._precision: Precision = precision
        self._checkpoint_io: CheckpointIO = checkpoint_io
        self._cluster_environment: ClusterEnvironment = cluster_environment
        self._collective: Collective = collective
        self._launcher: Launcher | None = launcher
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise ConfigurationError(
                f"{name}: num_nodes must be a positive int; got {describe_value(num_nodes)}."
            )
        self._num_nodes = num_nodes
        devices = (
            parallel_devices
            if parallel_devices is not None
            else self.default_parallel_devices(self._accelerator)
        )
        self._parallel_devices: list[torch.device] = _checked_devices(
            devices, self._accelerator.device_type, name
        )
        self._state: LifecycleState = "not_set_up"
        # Cached at setup_environment for the hot path.
        self._ready = False
        self._device: torch.device = self._parallel_devices[0]
        self._non_blocking = False

    # -- defaults (overridable) -----------------------------------------------------------

    def default_accelerator(self) -> Accelerator:
        """The accelerator used when the constructor gets ``None``: the CPU accelerator."""
        from trainspec.reference.accelerators.cpu import CPUAccelerator

        return CPUAccelerator()

    def default_precision(self) -> Precision:
        """The precision used when the constructor gets ``None``: ``"32-true"``."""
        from trainspec.reference.precisions import Float32Precision

        return Float32Precision()

    def default_checkpoint_io(self) -> CheckpointIO:
        """The checkpoint IO used when the constructor gets ``None``: weights-only torch IO."""
        from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

        return TorchCheckpointIO()

    def default_cluster_environment(self) -> ClusterEnvironment:
        """The cluster environment used when the constructor gets ``None``: the local one."""
        from trainspec.reference.cluster_environments.local import LocalEnvironment

        return LocalEnvironment()

    def default_parallel_devices(self, accelerator: Accelerator) -> list[torch.device]:
        """The devices used when ``parallel_devices`` is ``None``:
        ``accelerator.parse_devices("auto")``."""
        return accelerator.parse_devices("auto")

    # -- components (STRAT-1) -------------------------------------------------------------

    @property
    def accelerator(self) -> Accelerator:
        """The accelerator (STRAT-1)."""
        return self._accelerator

    @property
    def precision(self) -> Precision:
        """The precision (STRAT-1)."""
        return self._precision

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint IO (STRAT-1)."""
        return self._checkpoint_io

    @property
    def cluster_environment(self) -> ClusterEnvironment:
        """The cluster environment (STRAT-1)."""
        return self._cluster_environment

    @property
    def launcher(self) -> Launcher | None:
        """The launcher given to the constructor (STRAT-1); subclasses may override."""
        return self._launcher

    @property
    def collective(self) -> Collective:
        """The collective every collective method delegates to; read-only."""
        return self._collective

    @property
    def parallel_devices(self) -> list[torch.device]:
        """The devices of this node that the strategy's ranks use (a copy)."""
        return list(self._parallel_devices)

    @property
    def num_nodes(self) -> int:
        """The number of nodes the run spans."""
        return self._num_nodes

    @property
    def lifecycle_state(self) -> LifecycleState:
        """``"not_set_up"``, ``"set_up"`` or ``"torn_down"``."""
        return self._state

    # -- ranks and devices (STRAT-2) ------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        """``parallel_devices[local_rank]`` (STRAT-2); raises
        :class:`~trainspec.ConfigurationError` when the local rank has no device."""
        local_rank = self.local_rank
        if not 0 <= local_rank < len(self._parallel_devices):
            raise ConfigurationError(
                f"{type(self).__name__}: local rank {local_rank} has no device; this node has "
                f"{len(self._parallel_devices)} device(s): {self._parallel_devices}."
            )
        return self._parallel_devices[local_rank]

    @property
    def global_rank(self) -> int:
        """The cluster environment's global rank (STRAT-2)."""
        return self._cluster_environment.global_rank

    @property
    def local_rank(self) -> int:
        """The cluster environment's local rank (STRAT-2)."""
        return self._cluster_environment.local_rank

    @property
    def node_rank(self) -> int:
        """The cluster environment's node rank (STRAT-2)."""
        return self._cluster_environment.node_rank

    @property
    def world_size(self) -> int:
        """The cluster environment's world size (STRAT-2)."""
        return self._cluster_environment.world_size

    @property
    def is_global_zero(self) -> bool:
        """``global_rank == 0`` (STRAT-2)."""
        return self.global_rank == 0

    # -- lifecycle (STRAT-3, STRAT-4) ----------------------------------------------------

    def setup_environment(self) -> None:
        """Set up the root device, the collective and the precision, in that order (STRAT-3).

        Raises :class:`~trainspec.LifecycleError` when already set up, and whatever a
        component raises; in that case the components set up so far are torn down again and
        the strategy stays in its previous state.
        """
        if self._state == "set_up":
            raise self._lifecycle_error("setup_environment")
        device = self.root_device
        done: list[Accelerator | Collective] = []
        try:
            self._accelerator.setup_device(device)
            done.append(self._accelerator)
            self._collective.setup(self._cluster_environment, device)
            done.append(self._collective)
            self._precision.setup(device)
        except BaseException:
            for component in reversed(done):
                try:
                    component.teardown()
                except Exception:  # the original error is the one worth raising
                    pass
            raise
        self._device = device
        self._non_blocking = device.type not in _BLOCKING_DEVICE_TYPES
        self._state = "set_up"
        self._ready = True

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Convert ``module`` with the precision, move it to :attr:`root_device` and return
        :meth:`wrap_module` of it (STRAT-5)."""
        if not self._ready:
            raise self._lifecycle_error("setup_module")
        module = self._precision.convert_module(module)
        module = module.to(self._device)
        return self.wrap_module(module)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Return ``optimizer`` unchanged (STRAT-5); subclasses may wrap or shard it."""
        if not self._ready:
            raise self._lifecycle_error("setup_optimizer")
        return optimizer

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Wrap the converted, moved ``module`` as the strategy needs (default: unchanged).

        Called by :meth:`setup_module`; the result **must** compute the same function, and
        :meth:`unwrap_module` **must** invert it.
        """
        return module

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside a module returned by :meth:`setup_module` (default:
        ``module`` itself). :meth:`module_state_dict` uses it so that keys carry no wrapper
        prefix (STRAT-14). **Must** accept an unwrapped module too and return it unchanged."""
        return module

    def teardown(self) -> None:
        """Tear down the checkpoint IO, collective, precision, accelerator and cluster
        environment, in that order (STRAT-4).

        Idempotent: a no-op unless set up. Every component is torn down even if an earlier
        one raises; the first error is raised afterwards and the strategy is ``torn_down``
        regardless, so ``setup_environment`` may run again.
        """
        if self._state != "set_up":
            return
        self._ready = False
        self._state = "torn_down"
        first_error: BaseException | None = None
        for component in (
            self._checkpoint_io,
            self._collective,
            self._precision,
            self._accelerator,
            self._cluster_environment,
        ):
            try:
                component.teardown()
            except BaseException as error:
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error

    # -- training (STRAT-6 ... STRAT-11) --------------------------------------------------

    def module_init_context(self) -> AbstractContextManager[None]:
        """:attr:`root_device` as the default device plus the precision's init context, so
        that modules are created on the device in the parameter dtype (STRAT-6)."""
        if not self._ready:
            raise self._lifecycle_error("module_init_context")
        return self._init_context()

    @contextmanager
    def _init_context(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(self._device)
            stack.enter_context(self._precision.module_init_context())
            yield

    def forward_context(self) -> AbstractContextManager[None]:
        """The precision's forward context (STRAT-6)."""
        if not self._ready:
            raise self._lifecycle_error("forward_context")
        return self._precision.forward_context()

    def batch_to_device(self, batch: _T) -> _T:
        """Move every tensor in ``batch`` (nested lists, tuples, named tuples, dicts and
        dataclass instances) to :attr:`root_device`, then apply the precision's
        ``convert_input`` (STRAT-7). Other values are returned as they are. Copies to devices
        other than CPU and MPS are non-blocking."""
        if not self._ready:
            raise self._lifecycle_error("batch_to_device")
        moved = cast("_T", _move(batch, self._device, self._non_blocking))
        return self._precision.convert_input(moved)

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """The precision's backward (STRAT-9); gradient synchronisation is the wrapper's job."""
        if not self._ready:
            raise self._lifecycle_error("backward")
        self._precision.backward(tensor, module)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The precision's optimizer step (STRAT-10)."""
        if not self._ready:
            raise self._lifecycle_error("optimizer_step")
        return self._precision.optimizer_step(optimizer)

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        """Unscale through the precision, clip the gradients of ``optimizer``'s parameters to
        ``max_norm`` and return their total norm before clipping (STRAT-11).

        With full, synchronised gradients on every rank this norm is the global one. Raises
        :class:`~trainspec.ConfigurationError` for a ``max_norm`` that is not a positive
        finite number or a ``norm_type`` that is not positive.
        """
        if not self._ready:
            raise self._lifecycle_error("clip_gradients_norm")
        if not isinstance(max_norm, (int, float)) or not 0 < max_norm < math.inf:
            raise ConfigurationError(
                f"clip_gradients_norm: max_norm must be a positive finite number; got {max_norm!r}."
            )
        if not isinstance(norm_type, (int, float)) or not norm_type > 0:
            raise ConfigurationError(
                f"clip_gradients_norm: norm_type must be a positive number or inf; "
                f"got {norm_type!r}."
            )
        self._precision.unscale_gradients(optimizer)
        parameters = [
            parameter
            for group in optimizer.param_groups
            for parameter in group["params"]
            if parameter.grad is not None
        ]
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    # -- collectives (STRAT-12, STRAT-13) -------------------------------------------------

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """``collective.all_reduce`` (STRAT-12)."""
        if not self._ready:
            raise self._lifecycle_error("all_reduce")
        return self._collective.all_reduce(tensor, reduce_op, timeout=timeout)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """``collective.all_gather`` (STRAT-12)."""
        if not self._ready:
            raise self._lifecycle_error("all_gather")
        return self._collective.all_gather(tensor, timeout=timeout)

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """``collective.broadcast`` (STRAT-12)."""
        if not self._ready:
            raise self._lifecycle_error("broadcast")
        return self._collective.broadcast(tensor, src, timeout=timeout)

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """``collective.broadcast_object`` (STRAT-12)."""
        if not self._ready:
            raise self._lifecycle_error("broadcast_object")
        return self._collective.broadcast_object(obj, src, timeout=timeout)

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """``collective.barrier`` (STRAT-12)."""
        if not self._ready:
            raise self._lifecycle_error("barrier")
        self._collective.barrier(timeout=timeout)

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        """A ``"sum"`` all-reduce of ``decision`` compared with :attr:`world_size`
        (``all=True``) or with zero (``all=False``) (STRAT-13)."""
        if not self._ready:
            raise self._lifecycle_error("reduce_boolean_decision")
        votes = torch.tensor(int(bool(decision)), dtype=torch.int64, device=self._device)
        total = int(self._collective.all_reduce(votes, "sum").item())
        return total == self.world_size if all else total > 0

    # -- checkpoints (STRAT-14 ... STRAT-17) ----------------------------------------------

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """``unwrap_module(module).state_dict()`` as a plain dict (STRAT-14). The tensors
        share storage with the module's; copy them before mutating."""
        if not self._ready:
            raise self._lifecycle_error("module_state_dict")
        return dict(self.unwrap_module(module).state_dict())

    def load_module_state_dict(
        self,
        module: torch.nn.Module,
        state_dict: Mapping[str, torch.Tensor],
        strict: bool = True,
    ) -> None:
        """Load unwrapped-key ``state_dict`` into ``unwrap_module(module)`` (STRAT-14).

        Missing or unexpected keys (with ``strict``) and shape mismatches (always) raise
        :class:`~trainspec.ConfigurationError`.
        """
        if not self._ready:
            raise self._lifecycle_error("load_module_state_dict")
        try:
            self.unwrap_module(module).load_state_dict(state_dict, strict=strict)
        except RuntimeError as error:  # torch reports key and shape mismatches this way
            raise ConfigurationError(
                f"load_module_state_dict: the state dict does not fit the module: {error}"
            ) from error

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> StateDict:
        """``optimizer.state_dict()`` (STRAT-15); the full state on every rank."""
        if not self._ready:
            raise self._lifecycle_error("optimizer_state_dict")
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        """``optimizer.load_state_dict(state_dict)`` (STRAT-15); a state that does not fit
        raises :class:`~trainspec.ConfigurationError`."""
        if not self._ready:
            raise self._lifecycle_error("load_optimizer_state_dict")
        try:
            optimizer.load_state_dict(dict(state_dict))
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigurationError(
                f"load_optimizer_state_dict: the state dict does not fit the optimizer "
                f"({type(error).__name__}: {error})."
            ) from error

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Save on global rank zero only, waiting for an asynchronous checkpoint IO, then
        agree with every rank that the save succeeded (STRAT-16).

        Every rank returns only after the checkpoint is complete. Rank zero re-raises its own
        error; the other ranks raise :class:`~trainspec.CheckpointWriteError` naming the path.
        """
        if not self._ready:
            raise self._lifecycle_error("save_checkpoint")
        self._on_rank_zero_then_agree(
            "save",
            path,
            lambda: self._save_and_wait(checkpoint, path, storage_options),
        )

    def _save_and_wait(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions
    ) -> None:
        io = self._checkpoint_io
        io.save_checkpoint(checkpoint, path, storage_options=storage_options)
        if isinstance(io, AsyncCheckpointIO):
            io.wait()

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        """``checkpoint_io.load_checkpoint(path, map_location=root_device)`` on every rank
        (STRAT-17)."""
        if not self._ready:
            raise self._lifecycle_error("load_checkpoint")
        return self._checkpoint_io.load_checkpoint(path, map_location=self._device)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Remove on global rank zero only; every rank returns after the removal (STRAT-17)."""
        if not self._ready:
            raise self._lifecycle_error("remove_checkpoint")
        self._on_rank_zero_then_agree(
            "remove", path, lambda: self._checkpoint_io.remove_checkpoint(path)
        )

    def _on_rank_zero_then_agree(
        self, what: str, path: PathLike, action: Callable[[], None]
    ) -> None:
        # A failed rank-zero write must not leave the other ranks waiting at a barrier: the
        # outcome is all-reduced instead, which is also the barrier.
        error: Exception | None = None
        if self.is_global_zero:
            try:
                action()
            except Exception as caught:
                error = caught
        succeeded = self.reduce_boolean_decision(error is None, all=True)
        if error is not None:
            raise error
        if not succeeded:
            raise CheckpointWriteError(
                f"global rank 0 failed to {what} the checkpoint at {str(path)!r}; "
                "its error is raised on rank 0."
            )

    # -- helpers --------------------------------------------------------------------------

    def require_set_up(self, method: str) -> None:
        """Raise :class:`~trainspec.LifecycleError` naming ``method`` and the state unless the
        strategy is set up. Subclasses call it at the top of their own step-3/4/5 methods
        (STRAT-3)."""
        if not self._ready:
            raise self._lifecycle_error(method)

    def _lifecycle_error(self, method: str) -> LifecycleError:
        if self._state == "set_up":
            hint = "it is already set up; call teardown() first"
        else:
            hint = "call setup_environment() first"
        return LifecycleError(
            f"{type(self).__name__}.{method}() is not allowed while the strategy is "
            f"{self._state.replace('_', ' ')}; {hint}."
        )


def _wrong_kind(owner: str, role: str, protocol: str, value: object) -> ConfigurationError:
    return ConfigurationError(
        f"{owner}: {role} must implement trainspec.{protocol}; "
        f"got {value!r} of type {type(value).__name__}."
    )


def _checked_devices(devices: object, device_type: str, owner: str) -> list[torch.device]:
    if (
        not isinstance(devices, (list, tuple))
        or not devices
        or not all(isinstance(device, torch.device) for device in devices)
    ):
        raise ConfigurationError(
            f"{owner}: parallel_devices must be a non-empty list of torch.device; got {devices!r}."
        )
    wrong = [device for device in devices if device.type != device_type]
    if wrong:
        raise ConfigurationError(
            f"{owner}: parallel_devices must all be of the accelerator's type "
            f"{device_type!r}; got {wrong}."
        )
    return list(devices)


def _move(obj: object, device: torch.device, non_blocking: bool) -> object:
    """``obj`` with every tensor moved to ``device``, in the same structure (the shared
    walker :func:`~trainspec.reference._containers.map_tensors`)."""

    if type(obj) is torch.Tensor:  # the most common batch, without the walk
        if obj.device == device:  # cheaper than a no-op .to()
            return obj
        return obj.to(device, non_blocking=non_blocking)

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == device:
            return tensor
        return tensor.to(device, non_blocking=non_blocking)

    return map_tensors(obj, move, "batch_to_device")
