"""``Runner``: the reference training-loop façade over the Strategy protocol.

The Runner proves that :class:`trainspec.Strategy` is enough to train: it talks only to that
protocol (and checks optional capabilities such as :class:`trainspec.BackwardSyncControl`
with ``isinstance``), so any conforming strategy plugin works with it. Per-step methods are
one delegation each, so a loop through the Runner costs the same as a hand-written one.

A typical run::

    runner = Runner.from_config(accelerator="cpu", precision="bf16-mixed")

    def train(runner: Runner, steps: int) -> float:
        with runner.init_module():
            module = Net()
        module, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), 0.1))
        for batch in runner.setup_dataloader(loader):
            x, y = runner.to_device(batch)
            with runner.autocast():
                loss = loss_fn(module(x), y)
            runner.backward(loss, module)
            runner.step(optimizer)
        runner.save("ckpt.pt", {"module": module, "optimizer": optimizer, "step": steps})
        return loss.item()

    runner.launch(train, 100)

Lifecycle::

    1) launch(fn, *args)  -- starts the ranks (strategy.launcher) and, on each rank, sets the
                             environment up, calls fn(runner, *args), tears down
       or, without launch: setup(...) sets the environment up on first use (only allowed
       when the strategy has no launcher), teardown() ends the run
    2) setup / setup_module / setup_dataloader, then training and checkpoint calls
    3) teardown()         -- idempotent; 1) may run again
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Concatenate, Final, Generic, ParamSpec, TypeVar

import torch

from trainspec.capabilities import BackwardSyncControl, StepBoundary
from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.strategy import Strategy

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping, Sequence
    from contextlib import AbstractContextManager
    from datetime import timedelta
    from types import TracebackType

    from torch.utils.data import DataLoader
    from typing_extensions import Self

    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.precision import Precision
    from trainspec.types import (
        Checkpoint,
        DeviceRequest,
        PathLike,
        ReduceOp,
        StorageOptions,
    )

__all__ = ["TRAINSPEC_KEY", "Runner"]

_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")

TRAINSPEC_KEY: Final = "trainspec"
"""The checkpoint key under which :meth:`Runner.save` stores the Runner's own entries (the
precision's state); a ``state`` passed to :meth:`Runner.save` must not use it."""

_FORMAT: Final = 1


class Runner:
    """A training-loop façade over one :class:`trainspec.Strategy`.

    Every method delegates to the strategy; see the module docstring for the call sequence.
    A Runner is used by one thread per rank. It must be picklable when the strategy's
    launcher pickles the function's arguments (the Runner is passed to ``fn``), which holds
    whenever the strategy itself is picklable.

    A member named like a member of :class:`trainspec.Strategy` (or of an optional capability
    protocol: ``no_backward_sync``, ``mark_step``) calls that member: ``global_rank``,
    ``local_rank``, ``node_rank``, ``world_size``, ``is_global_zero``, ``setup_module``,
    ``teardown``, ``backward``, ``all_reduce``, ``all_gather``, ``broadcast``,
    ``broadcast_object``, ``barrier``, ``reduce_boolean_decision``. The others carry the
    shorter names of a training loop; this table maps them (a test keeps it complete, and
    docs/api-reference.md repeats it):

    | Runner member | Strategy members it calls |
    | --- | --- |
    | `strategy` | the strategy itself |
    | `from_config` | none: builds one with `trainspec.reference.connector.resolve` |
    | `device` | `root_device` |
    | `launch` | `launcher.launch`, `setup_environment`, `teardown` |
    | `setup` | `setup_module`, `setup_optimizer` |
    | `setup_dataloader` | `process_dataloader` |
    | `init_module` | `module_init_context` |
    | `to_device` | `batch_to_device` |
    | `autocast` | `forward_context` |
    | `step` | `optimizer_step` |
    | `clip_gradients` | `clip_gradients_norm` |
    | `save` | `module_state_dict`, `optimizer_state_dict`, `save_checkpoint` |
    | `load` | `load_checkpoint`, `load_module_state_dict`, `load_optimizer_state_dict` |

    ``save`` and ``load`` also store and restore ``strategy.precision``'s state.
    """

    def __init__(self, strategy: Strategy) -> None:
        """Wrap ``strategy`` (any :class:`trainspec.Strategy`, not yet set up); a value that
        is not a Strategy raises :class:`~trainspec.ConfigurationError`."""
        if not isinstance(strategy, Strategy):
            raise ConfigurationError(
                f"Runner: strategy must implement trainspec.Strategy; got {strategy!r} of "
                f"type {type(strategy).__name__}. Use Runner.from_config(...) to build one "
                "from names."
            )
        self._strategy = strategy
        self._environment_ready = False

    @classmethod
    def from_config(
        cls,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy = "auto",
        devices: DeviceRequest = "auto",
        num_nodes: int = 1,
        precision: str | Precision = "32-true",
        checkpoint_io: str | CheckpointIO | None = None,
        cluster_environment: str | ClusterEnvironment | None = None,
        plugins: Sequence[Precision | CheckpointIO | ClusterEnvironment] = (),
    ) -> Runner:
        """A Runner over ``trainspec.reference.connector.resolve(...)`` with these arguments
        (see there); raises what ``resolve`` raises."""
        from trainspec.reference.connector import resolve

        return cls(
            resolve(
                accelerator=accelerator,
                strategy=strategy,
                devices=devices,
                num_nodes=num_nodes,
                precision=precision,
                checkpoint_io=checkpoint_io,
                cluster_environment=cluster_environment,
                plugins=plugins,
            )
        )

    # -- properties -----------------------------------------------------------------------

    @property
    def strategy(self) -> Strategy:
        """The strategy every call delegates to."""
        return self._strategy

    @property
    def device(self) -> torch.device:
        """The strategy's root device."""
        return self._strategy.root_device

    @property
    def global_rank(self) -> int:
        """The strategy's global rank."""
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        """The strategy's local rank."""
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        """The strategy's node rank."""
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        """The strategy's world size."""
        return self._strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank zero."""
        return self._strategy.is_global_zero

    # -- lifecycle ------------------------------------------------------------------------

    def launch(
        self,
        fn: Callable[Concatenate[Runner, _P], _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        """Run ``fn(runner, *args, **kwargs)`` on every rank and return rank 0's result.

        With a launcher, ``strategy.launcher.launch`` starts the ranks; otherwise ``fn`` runs
        in this process. On each rank the environment is set up before ``fn`` and torn down
        after it (also when it raises). Raises :class:`~trainspec.LifecycleError` when the
        environment is already set up in this process.
        """
        if self._environment_ready:
            raise LifecycleError(
                "Runner.launch() needs a runner that is not set up; call teardown() first."
            )
        launcher = self._strategy.launcher
        if launcher is None:
            return self._run_on_rank(fn, *args, **kwargs)
        return launcher.launch(_OnRank(self, fn), *args, **kwargs)

    def _run_on_rank(
        self,
        fn: Callable[Concatenate[Runner, _P], _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        self._setup_environment()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self.teardown()

    def _setup_environment(self) -> None:
        self._strategy.setup_environment()
        self._environment_ready = True

    def _ensure_environment(self, method: str) -> None:
        if self._environment_ready:
            return
        if self._strategy.launcher is not None:
            raise LifecycleError(
                f"Runner.{method}() was called before the ranks were started; the strategy "
                f"{type(self._strategy).__name__} has a launcher, so run the training "
                "function through Runner.launch(fn, ...)."
            )
        self._setup_environment()

    def teardown(self) -> None:
        """Tear the strategy down; idempotent. The runner may be set up again afterwards."""
        if not self._environment_ready:
            return
        self._environment_ready = False
        self._strategy.teardown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.teardown()

    # -- setup ----------------------------------------------------------------------------

    def setup(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """``strategy.setup_module(module)`` then ``strategy.setup_optimizer(optimizer)``;
        sets the environment up first when needed (see the module docstring)."""
        self._ensure_environment("setup")
        module = self._strategy.setup_module(module)
        return module, self._strategy.setup_optimizer(optimizer)

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``strategy.setup_module(module)`` (for a module trained without an optimizer of
        its own, or evaluated)."""
        self._ensure_environment("setup_module")
        return self._strategy.setup_module(module)

    def setup_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        """``strategy.process_dataloader(dataloader)``: this rank's share of the data."""
        self._ensure_environment("setup_dataloader")
        return self._strategy.process_dataloader(dataloader)

    def init_module(self) -> AbstractContextManager[None]:
        """``strategy.module_init_context()``: build modules under it."""
        self._ensure_environment("init_module")
        return self._strategy.module_init_context()

    # -- per step -------------------------------------------------------------------------

    def to_device(self, batch: _T) -> _T:
        """``strategy.batch_to_device(batch)``."""
        return self._strategy.batch_to_device(batch)

    def autocast(self) -> AbstractContextManager[None]:
        """``strategy.forward_context()``: run the forward pass under it."""
        return self._strategy.forward_context()

    def backward(self, loss: torch.Tensor, module: torch.nn.Module | None = None) -> None:
        """``strategy.backward(loss, module)``."""
        self._strategy.backward(loss, module)

    def step(self, optimizer: torch.optim.Optimizer, *, zero_grad: bool = True) -> bool:
        """``strategy.optimizer_step(optimizer)``, then ``optimizer.zero_grad()`` unless
        ``zero_grad=False``. Returns whether the parameters were updated."""
        stepped = self._strategy.optimizer_step(optimizer)
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)
        return stepped

    def clip_gradients(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        """``strategy.clip_gradients_norm(...)``: the global norm before clipping."""
        return self._strategy.clip_gradients_norm(module, optimizer, max_norm, norm_type)

    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """Skip gradient synchronisation for the backward passes inside (gradient
        accumulation) where the strategy supports it (:class:`trainspec.BackwardSyncControl`);
        otherwise a no-op context, which gives the same gradients by synchronising every
        micro-batch."""
        strategy = self._strategy
        if isinstance(strategy, BackwardSyncControl):
            return strategy.no_backward_sync(module, enabled)
        return nullcontext()

    def mark_step(self) -> None:
        """``strategy.mark_step()`` on lazy devices (:class:`trainspec.StepBoundary`);
        otherwise nothing."""
        strategy = self._strategy
        if isinstance(strategy, StepBoundary):
            strategy.mark_step()

    # -- checkpoints ----------------------------------------------------------------------

    def save(
        self,
        path: PathLike,
        state: Mapping[str, object],
        storage_options: StorageOptions = None,
    ) -> None:
        """Save ``state`` through ``strategy.save_checkpoint`` on every rank (under the full
        checkpoint layout rank zero writes, under the sharded one every rank writes its part;
        every rank returns after the checkpoint is complete, STRAT-16).

        Modules become ``strategy.module_state_dict(module)``, optimizers
        ``strategy.optimizer_state_dict(optimizer)``; other values are saved as they are.
        The precision's state is added under :data:`TRAINSPEC_KEY`, which ``state`` must
        not use (:class:`~trainspec.ConfigurationError`).
        """
        if TRAINSPEC_KEY in state:
            raise ConfigurationError(
                f"Runner.save(): the key {TRAINSPEC_KEY!r} is reserved for the runner's own "
                "state; rename that entry."
            )
        strategy = self._strategy
        checkpoint: Checkpoint = {}
        for key, value in state.items():
            if isinstance(value, torch.nn.Module):
                checkpoint[key] = strategy.module_state_dict(value)
            elif isinstance(value, torch.optim.Optimizer):
                checkpoint[key] = strategy.optimizer_state_dict(value)
            else:
                checkpoint[key] = value
        checkpoint[TRAINSPEC_KEY] = {
            "format": _FORMAT,
            "precision": strategy.precision.state_dict(),
        }
        strategy.save_checkpoint(checkpoint, path, storage_options)

    def load(
        self,
        path: PathLike,
        state: MutableMapping[str, object] | None = None,
        *,
        strict: bool = True,
    ) -> Checkpoint:
        """Load the checkpoint at ``path`` (onto the root device) into ``state``.

        For each key of ``state``: a module gets ``strategy.load_module_state_dict`` (with
        ``strict``), an optimizer ``strategy.load_optimizer_state_dict``, any other value is
        replaced by the checkpoint's value. The precision's saved state is restored. Returns
        the checkpoint entries not consumed by ``state`` (everything, when ``state`` is
        ``None``). With ``strict``, a key of ``state`` missing from the checkpoint raises
        :class:`~trainspec.ConfigurationError`; without, it is left as it is.
        """
        strategy = self._strategy
        checkpoint = strategy.load_checkpoint(path)
        own = checkpoint.pop(TRAINSPEC_KEY, None)
        if isinstance(own, dict) and "precision" in own:
            strategy.precision.load_state_dict(own["precision"])
        if state is None:
            return checkpoint
        missing = [key for key in state if key not in checkpoint]
        if missing and strict:
            raise ConfigurationError(
                f"Runner.load(): the checkpoint at {str(path)!r} has no entries {missing}; it "
                f"has {sorted(checkpoint)}. Pass strict=False to skip missing entries."
            )
        for key, target in state.items():
            if key not in checkpoint:
                continue
            saved = checkpoint.pop(key)
            if isinstance(target, torch.nn.Module):
                strategy.load_module_state_dict(target, saved, strict=strict)
            elif isinstance(target, torch.optim.Optimizer):
                strategy.load_optimizer_state_dict(target, saved)
            else:
                state[key] = saved
        return checkpoint

    # -- collectives ----------------------------------------------------------------------

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """``strategy.all_reduce`` (default ``"mean"``)."""
        return self._strategy.all_reduce(tensor, reduce_op, timeout=timeout)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """``strategy.all_gather``."""
        return self._strategy.all_gather(tensor, timeout=timeout)

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """``strategy.broadcast``."""
        return self._strategy.broadcast(tensor, src, timeout=timeout)

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """``strategy.broadcast_object``."""
        return self._strategy.broadcast_object(obj, src, timeout=timeout)

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """``strategy.barrier``."""
        self._strategy.barrier(timeout=timeout)

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        """``strategy.reduce_boolean_decision``."""
        return self._strategy.reduce_boolean_decision(decision, all=all)


class _OnRank(Generic[_P, _R]):
    """What a launcher runs on each rank: set up, ``fn(runner, ...)``, tear down. A class
    rather than a closure so that spawn-style launchers can pickle it."""

    def __init__(self, runner: Runner, fn: Callable[Concatenate[Runner, _P], _R]) -> None:
        self.runner = runner
        self.fn = fn

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self.runner._run_on_rank(self.fn, *args, **kwargs)
