"""``FSDPStrategy``: sharded data-parallel training on FSDP2 (``fully_shard``).

Every parameter is a ``DTensor`` sharded along dimension 0 over the ranks; FSDP2 gathers a
layer's parameters for its forward and backward and reduce-scatters the gradients, so each rank
holds 1/N of the parameters, gradients and optimizer state. N ranks with batch B each train like
one rank with the N*B batch (E2E-1), as with DDP.

Checkpoints follow :attr:`FSDPStrategy.checkpoint_layout` (LAYOUT-1, STRAT-14 ... STRAT-17):

- ``"sharded"`` (the default): state dicts hold ``DTensor`` shards; every rank writes its part
  through a :class:`trainspec.DistributedCheckpointIO` (default
  :class:`~trainspec.reference.checkpoint_io.distributed.DCPCheckpointIO`), committed after
  every rank wrote; the checkpoint loads on any number of ranks;
- ``"full"``: state dicts hold complete tensors (gathered on every rank); global rank zero
  writes one file through a plain :class:`trainspec.CheckpointIO` (default
  :class:`~trainspec.reference.checkpoint_io.TorchCheckpointIO`), as DDP does.

Either checkpoint loads into :class:`~.ddp.DDPStrategy` and
:class:`~.single_device.SingleDeviceStrategy` (a sharded one through a ``DCPCheckpointIO``) and
back (E2E-3): optimizer state uses torch's integer-keyed format in both layouts.

Typical use (as with DDP, the same script works under ``torchrun``)::

    strategy = FSDPStrategy(parallel_devices=[torch.device("cpu")] * 2)
    # inside the launched function, on every rank:
    strategy.setup_environment()
    with strategy.sharded_module_context():     # parameters on the meta device
        module = Model()
    module = strategy.setup_module(module)      # shards materialised and initialised
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from trainspec.capabilities import ShardedModuleContext
from trainspec.distributed_checkpoint_io import (
    CHECKPOINT_LAYOUTS,
    CheckpointLayout,
    CheckpointLayoutControl,
    DistributedCheckpointIO,
)
from trainspec.errors import ConfigurationError, UnsupportedError
from trainspec.reference.strategies.ddp import DDPStartMethod, DDPStrategy

if TYPE_CHECKING:
    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.precision import Precision
    from trainspec.types import Checkpoint, PathLike, StateDict, StorageOptions

__all__ = ["FSDPStrategy", "WrapPolicy"]

WrapPolicy = Callable[[torch.nn.Module], bool] | Collection[type[torch.nn.Module]]
"""Which submodules get their own ``fully_shard`` (their own all-gather and reduce-scatter
group): a predicate on each submodule, or a collection of module classes. The root module is
always wrapped last."""

_NAME: Final = "FSDPStrategy"
# Flags whose optimizer step depends on a gradient scaler: its skip decision would be per rank
# (each rank sees only its shards), so it is refused rather than silently diverging.
_SCALED_FLAGS: Final = frozenset({"16-mixed"})


def _owns_parameters(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False))


class FSDPStrategy(DDPStrategy, ShardedModuleContext, CheckpointLayoutControl):
    """One process per device, parameters sharded by FSDP2 (STRAT-1 ... STRAT-17, SYNC-1,
    SHARD-1, LAYOUT-1).

    Ranks, launcher, data sharding and the collective are :class:`~.ddp.DDPStrategy`'s.

    - **Wrapping**: ``wrap_policy`` (see :data:`WrapPolicy`; default: every submodule that owns
      parameters) picks the submodules that get their own ``fully_shard``, innermost first,
      then the root. ``reshard_after_forward`` is passed to ``fully_shard``.
    - **Precision**: the precision converts the module before sharding (``*-true`` flags shard
      parameters of ``param_dtype``); for ``bf16-mixed`` FSDP2 gathers parameters in bfloat16
      and reduces gradients in float32 (``MixedPrecisionPolicy``), under the precision's
      autocast. ``16-mixed`` needs a gradient scaler whose skip decision would differ between
      ranks and raises :class:`~trainspec.UnsupportedError` at ``setup_environment``.
    - **Sharded construction**: :meth:`sharded_module_context` builds on the meta device;
      :meth:`setup_module` shards, materialises this rank's shards on the root device and
      calls each submodule's ``reset_parameters()`` (SHARD-1).
    - **Gradient accumulation**: :meth:`no_backward_sync` turns off FSDP2's gradient
      reduce-scatter (``set_requires_gradient_sync(False)``) for the backward passes inside.
    - **Clipping**: the norm is computed over the sharded gradients and reduced across ranks:
      the global norm, the same on every rank (STRAT-11).
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"sharded_checkpoint"})
    """What the conformance kit verifies beyond the protocol for the default (sharded) layout
    (``trainspec verify`` reads it); not ``data_parallel``: no rank holds the whole module."""

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
        checkpoint_layout: CheckpointLayout = "sharded",
        wrap_policy: WrapPolicy | None = None,
        reshard_after_forward: bool = True,
    ) -> None:
        """The keyword arguments of :class:`~.ddp.DDPStrategy` (without the
        ``DistributedDataParallel`` options) plus ``checkpoint_layout`` (``"sharded"`` or
        ``"full"``), ``wrap_policy`` and ``reshard_after_forward``. Under ``"sharded"``,
        ``checkpoint_io`` must be a :class:`trainspec.DistributedCheckpointIO`. Bad values raise
        :class:`~trainspec.ConfigurationError` naming the valid choices."""
        if checkpoint_layout not in CHECKPOINT_LAYOUTS:
            raise ConfigurationError(
                f"{_NAME}: checkpoint_layout must be one of {list(CHECKPOINT_LAYOUTS)}; "
                f"got {checkpoint_layout!r}."
            )
        if wrap_policy is not None and not callable(wrap_policy):
            classes = list(wrap_policy) if isinstance(wrap_policy, Collection) else [wrap_policy]
            if isinstance(wrap_policy, (str, bytes)) or not all(
                isinstance(cls, type) and issubclass(cls, torch.nn.Module) for cls in classes
            ):
                raise ConfigurationError(
                    f"{_NAME}: wrap_policy must be None, a predicate on modules or a collection "
                    f"of torch.nn.Module classes; got {wrap_policy!r}."
                )
        if not isinstance(reshard_after_forward, bool):
            raise ConfigurationError(
                f"{_NAME}: reshard_after_forward must be a bool; got {reshard_after_forward!r}."
            )
        # Read by default_checkpoint_io(), which runs inside super().__init__.
        self._layout: CheckpointLayout = checkpoint_layout
        super().__init__(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            num_nodes=num_nodes,
            start_method=start_method,
            backend=backend,
            timeout=timeout,
            sampler_seed=sampler_seed,
        )
        if checkpoint_layout == "sharded" and not isinstance(
            self.checkpoint_io, DistributedCheckpointIO
        ):
            raise ConfigurationError(
                f"{_NAME}: checkpoint_layout='sharded' needs a trainspec.DistributedCheckpointIO "
                f"(for example DCPCheckpointIO); got {type(self.checkpoint_io).__name__}. Pass "
                "one, or use checkpoint_layout='full'."
            )
        self._wrap_policy = wrap_policy
        self._reshard_after_forward = reshard_after_forward
        self._sharded: list[torch.nn.Module] = []
        self._replaced: dict[int, tuple[weakref.ref[torch.nn.Parameter], torch.nn.Parameter]] = {}

    def default_checkpoint_io(self) -> CheckpointIO:
        """``DCPCheckpointIO()`` under the sharded layout, ``TorchCheckpointIO()`` under the
        full one."""
        if self._layout == "sharded":
            from trainspec.reference.checkpoint_io.distributed import DCPCheckpointIO

            return DCPCheckpointIO()
        return super().default_checkpoint_io()

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()
        state["_sharded"] = []
        state["_replaced"] = {}
        return state

    @property
    def checkpoint_layout(self) -> CheckpointLayout:
        """``"sharded"`` or ``"full"``, as constructed (LAYOUT-1)."""
        return self._layout

    # -- lifecycle -------------------------------------------------------------------------

    def setup_environment(self) -> None:
        """As DDP's, then bind a distributed checkpoint IO to the collective (sharded layout)
        (STRAT-3, STRAT-16). ``16-mixed`` raises :class:`~trainspec.UnsupportedError`."""
        if self.lifecycle_state != "set_up" and self.precision.flag in _SCALED_FLAGS:
            raise UnsupportedError(
                f"{_NAME}: precision {self.precision.flag!r} needs a gradient scaler, whose "
                "skip decision is not agreed across shards in this version; use one of "
                "'32-true', '64-true', '16-true', 'bf16-true' or 'bf16-mixed'."
            )
        super().setup_environment()
        io = self.checkpoint_io
        if self._layout == "sharded" and isinstance(io, DistributedCheckpointIO):
            try:
                io.setup(self.collective)
            except BaseException:
                super().teardown()
                raise

    def teardown(self) -> None:
        """Forget the sharded modules, then tear down as DDP does (STRAT-4)."""
        self._sharded = []
        self._replaced = {}
        super().teardown()

    # -- modules ---------------------------------------------------------------------------

    def sharded_module_context(self) -> AbstractContextManager[None]:
        """Modules created inside have their parameters on the meta device, in the precision's
        parameter dtype; :meth:`setup_module` shards and materialises them (SHARD-1)."""
        self.require_set_up("sharded_module_context")
        return self._meta_context()

    @contextmanager
    def _meta_context(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(torch.device("meta"))
            stack.enter_context(self.precision.module_init_context())
            yield

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Convert with the precision, shard with ``fully_shard`` and place the shards on the
        root device (STRAT-5). A module built in :meth:`sharded_module_context` is sharded on
        the meta device first, then its shards are materialised and ``reset_parameters()``
        initialises them, so no rank ever holds the whole module (SHARD-1)."""
        self.require_set_up("setup_module")
        originals = dict(module.named_parameters())
        module = self.precision.convert_module(module)
        on_meta = any(t.is_meta for t in (*module.parameters(), *module.buffers()))
        if not on_meta:
            module = module.to(self.root_device)
        if not any(parameter.requires_grad for parameter in module.parameters()):
            raise ConfigurationError(
                f"{_NAME}.setup_module: the module has no parameter that requires a gradient; "
                "FSDP needs at least one."
            )
        sharded = self.wrap_module(module)
        if on_meta:
            sharded.to_empty(device=self.root_device)
            with torch.no_grad(), warnings.catch_warnings():
                # On a CPU mesh DTensor draws each shard from the rank's own generator and
                # warns so; the values are a valid random initialisation (SHARD-1 leaves them
                # unspecified), just not those of an unsharded module under the same seed.
                warnings.filterwarnings("ignore", message="DTensor random operators")
                for submodule in sharded.modules():
                    reset = getattr(submodule, "reset_parameters", None)
                    if callable(reset):
                        reset()
        # fully_shard replaces every parameter with a sharded one; an optimizer built over the
        # module before setup_module is rebound to them by setup_optimizer (STRAT-5).
        for name, original in originals.items():
            self._replaced[id(original)] = (weakref.ref(original), sharded.get_parameter(name))
        return sharded

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Return ``optimizer`` with every parameter of a module passed to
        :meth:`setup_module` replaced by its sharded counterpart, so an optimizer built before
        ``setup_module`` (as :meth:`trainspec.reference.Runner.setup` does) trains the sharded
        module (STRAT-5). An optimizer that already holds state for a replaced parameter
        raises :class:`~trainspec.ConfigurationError`."""
        self.require_set_up("setup_optimizer")
        for group in optimizer.param_groups:
            params: list[torch.Tensor] = list(group["params"])
            for index, param in enumerate(params):
                entry = self._replaced.get(id(param))
                if entry is None or entry[0]() is not param:
                    continue
                if optimizer.state.get(param):
                    raise ConfigurationError(
                        f"{_NAME}.setup_optimizer: the optimizer already holds state for a "
                        "parameter that setup_module replaced by a sharded one; set the "
                        "optimizer up before its first step."
                    )
                params[index] = entry[1]
            group["params"] = params
        return optimizer

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``fully_shard`` each submodule the wrap policy picks (innermost first), then the
        root; returns the same module object, now an ``FSDPModule``."""
        policy = self._policy()
        mesh_kwargs: dict[str, Any] = {
            "reshard_after_forward": self._reshard_after_forward,
            "mp_policy": self._mixed_precision_policy(),
        }
        children = [m for name, m in module.named_modules() if name and policy(m)]
        for child in reversed(children):  # innermost first
            fully_shard(child, **mesh_kwargs)
        fully_shard(module, **mesh_kwargs)
        self._sharded.append(module)
        return module

    def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module itself: ``fully_shard`` adds no wrapper and no key prefix."""
        return module

    def _policy(self) -> Callable[[torch.nn.Module], bool]:
        policy = self._wrap_policy
        if policy is None:
            return _owns_parameters
        if callable(policy):
            return policy
        classes = tuple(policy)
        return lambda module: isinstance(module, classes)

    def _mixed_precision_policy(self) -> MixedPrecisionPolicy:
        precision = self.precision
        if precision.flag.endswith("-mixed"):
            return MixedPrecisionPolicy(
                param_dtype=precision.compute_dtype, reduce_dtype=torch.float32
            )
        return MixedPrecisionPolicy()

    def _module_of(self, optimizer: torch.optim.Optimizer, method: str) -> torch.nn.Module:
        wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for module in self._sharded:
            if wanted <= {id(p) for p in module.parameters()}:
                return module
        raise ConfigurationError(
            f"{_NAME}.{method}: the optimizer's parameters belong to no module returned by "
            "setup_module on this strategy; set the module up first and build the optimizer "
            "over its parameters."
        )

    # -- gradient accumulation (SYNC-1) ------------------------------------------------------

    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """No gradient reduce-scatter for backward passes inside (SYNC-1)."""
        self.require_set_up("no_backward_sync")
        if not enabled:
            return nullcontext()
        if not isinstance(module, FSDPModule):
            raise ConfigurationError(
                f"{_NAME}.no_backward_sync: module must be the module returned by setup_module "
                f"(an FSDPModule); got {type(module).__name__}."
            )
        return _no_gradient_sync(module)

    # -- clipping (STRAT-11) ---------------------------------------------------------------

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        """Clip and return the global norm over every rank's gradient shards (STRAT-11)."""
        norm = super().clip_gradients_norm(module, optimizer, max_norm, norm_type)
        if isinstance(norm, DTensor):
            return norm.full_tensor()
        return norm

    # -- state dicts (STRAT-14, STRAT-15) ---------------------------------------------------

    def _options(self, *, full: bool, strict: bool = True) -> StateDictOptions:
        return StateDictOptions(full_state_dict=full, cpu_offload=False, strict=strict)

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Sharded layout: ``DTensor`` shards. Full layout: complete tensors on every rank
        (gathered). Keys are the module's own (STRAT-14)."""
        self.require_set_up("module_state_dict")
        full = self._layout == "full"
        state = get_model_state_dict(module, options=self._options(full=full))
        return {key: cast("torch.Tensor", value) for key, value in state.items()}

    def load_module_state_dict(
        self,
        module: torch.nn.Module,
        state_dict: Mapping[str, torch.Tensor],
        strict: bool = True,
    ) -> None:
        """Load complete tensors or ``DTensor`` shards, resharding as needed (STRAT-14).
        Missing or unexpected keys (with ``strict``) and shapes that do not fit raise
        :class:`~trainspec.ConfigurationError`."""
        self.require_set_up("load_module_state_dict")
        own = module.state_dict()
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if strict and (missing or unexpected):
            raise ConfigurationError(
                f"{_NAME}.load_module_state_dict: the state dict does not fit the module: "
                f"missing keys {missing}, unexpected keys {unexpected}; pass strict=False to "
                "ignore them."
            )
        wrong = [
            f"{key}: {tuple(value.shape)} (module: {tuple(own[key].shape)})"
            for key, value in state_dict.items()
            if key in own and tuple(value.shape) != tuple(own[key].shape)
        ]
        if wrong:
            raise ConfigurationError(
                f"{_NAME}.load_module_state_dict: shapes do not fit the module: {wrong}."
            )
        values: dict[str, Any] = {key: value for key, value in state_dict.items() if key in own}
        full = not any(isinstance(value, DTensor) for value in values.values())
        set_model_state_dict(module, values, options=self._options(full=full, strict=False))

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> StateDict:
        """torch's integer-keyed format; per-parameter tensors are ``DTensor`` shards
        (sharded layout) or complete tensors on every rank (full layout) (STRAT-15)."""
        self.require_set_up("optimizer_state_dict")
        module = self._module_of(optimizer, "optimizer_state_dict")
        full = self._layout == "full"
        by_name = get_optimizer_state_dict(module, optimizer, options=self._options(full=full))
        return _to_indices(cast("dict[str, Any]", by_name), optimizer)

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        """Restore what any strategy's ``optimizer_state_dict`` returned (STRAT-15); a state
        that does not fit raises :class:`~trainspec.ConfigurationError`."""
        self.require_set_up("load_optimizer_state_dict")
        module = self._module_of(optimizer, "load_optimizer_state_dict")
        names = {id(p): name for name, p in module.named_parameters()}
        try:
            by_name = _to_names(state_dict, optimizer, names)
            full = not any(
                isinstance(value, DTensor)
                for entry in by_name["state"].values()
                for value in entry.values()
            )
            set_optimizer_state_dict(
                module, optimizer, by_name, options=self._options(full=full, strict=True)
            )
            # As Optimizer.load_state_dict: the groups' settings exactly as saved (DCP's
            # redistribution turns tuples such as Adam's betas into lists).
            for live, saved in zip(optimizer.param_groups, state_dict["param_groups"], strict=True):
                live.update({key: value for key, value in saved.items() if key != "params"})
        except (ValueError, KeyError, TypeError, RuntimeError, AssertionError) as error:
            raise ConfigurationError(
                f"{_NAME}.load_optimizer_state_dict: the state dict does not fit the optimizer "
                f"({type(error).__name__}: {error})."
            ) from error

    # -- checkpoints (STRAT-16, STRAT-17) ---------------------------------------------------

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Sharded layout: every rank writes its part through the distributed checkpoint IO,
        which commits after every rank wrote. Full layout: rank zero writes (STRAT-16)."""
        if self._layout == "full":
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        self.require_set_up("save_checkpoint")
        self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        """The complete checkpoint on every rank, on the root device (STRAT-17)."""
        return super().load_checkpoint(path)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Sharded layout: the distributed checkpoint IO's collective removal; full layout:
        rank zero (STRAT-17)."""
        if self._layout == "full":
            super().remove_checkpoint(path)
            return
        self.require_set_up("remove_checkpoint")
        self.checkpoint_io.remove_checkpoint(path)


@contextmanager
def _no_gradient_sync(module: FSDPModule) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def _to_indices(by_name: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """DCP's name-keyed optimizer state in torch's integer-keyed format; the groups'
    hyperparameters as the optimizer holds them (DCP's gathering turns tuples into lists)."""
    index: dict[str, int] = {}
    groups: list[dict[str, Any]] = []
    for group, live in zip(by_name["param_groups"], optimizer.param_groups, strict=True):
        params = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            params.append(index[name])
        settings = {key: value for key, value in live.items() if key != "params"}
        groups.append({**group, **settings, "params": params})
    state = {index[name]: dict(entry) for name, entry in by_name["state"].items()}
    return {"state": state, "param_groups": groups}


def _to_names(
    state_dict: Mapping[str, Any], optimizer: torch.optim.Optimizer, names: dict[int, str]
) -> dict[str, Any]:
    """Torch's integer-keyed optimizer state for ``optimizer`` keyed by parameter names."""
    groups = state_dict["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        raise ValueError(
            f"the state has {len(groups)} parameter group(s), the optimizer "
            f"{len(optimizer.param_groups)}"
        )
    by_index: dict[object, str] = {}
    new_groups = []
    for saved, live in zip(groups, optimizer.param_groups, strict=True):
        if len(saved["params"]) != len(live["params"]):
            raise ValueError("a parameter group has a different number of parameters")
        fqns = [names[id(p)] for p in live["params"]]
        for saved_id, fqn in zip(saved["params"], fqns, strict=True):
            by_index[saved_id] = fqn
        new_groups.append({**saved, "params": fqns})
    state = {by_index[key]: dict(entry) for key, entry in state_dict["state"].items()}
    return {"state": state, "param_groups": new_groups}
