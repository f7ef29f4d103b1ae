"""Run-time behaviour of the contracts: ``isinstance`` against the protocols, explicit
subclassing, and the error hierarchy.

The structural classes below are minimal: they have every member with the protocol's signature
and do nothing. ``isinstance`` only checks that members exist (behaviour is the conformance
kit's job), so each is also stripped of one member at a time to show the check can fail. No
torch is imported: annotations are strings.
"""

from __future__ import annotations

import pickle
import re
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

import trainspec
from trainspec import errors

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractContextManager
    from datetime import timedelta

    import torch
    from torch.utils.data import DataLoader

_T = TypeVar("_T")


class StructuralAccelerator:
    @property
    def device_type(self) -> str:
        return "cpu"

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def parse_devices(self, devices: trainspec.DeviceRequest) -> list[torch.device]:
        return []

    def setup_device(self, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def synchronize(self, device: torch.device) -> None:
        pass

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {}


class StructuralPrecision:
    @property
    def flag(self) -> trainspec.PrecisionFlag:
        return "32-true"

    @property
    def param_dtype(self) -> torch.dtype:
        raise NotImplementedError

    @property
    def compute_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def setup(self, device: torch.device) -> None:
        pass

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def convert_input(self, data: _T) -> _T:
        return data

    def module_init_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        pass

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        return True

    def state_dict(self) -> trainspec.StateDict:
        return {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        pass


class StructuralCheckpointIO:
    def save_checkpoint(
        self,
        checkpoint: trainspec.Checkpoint,
        path: trainspec.PathLike,
        storage_options: trainspec.StorageOptions = None,
    ) -> None:
        pass

    def load_checkpoint(
        self, path: trainspec.PathLike, map_location: trainspec.MapLocation = None
    ) -> trainspec.Checkpoint:
        return {}

    def remove_checkpoint(self, path: trainspec.PathLike) -> None:
        pass

    def teardown(self) -> None:
        pass


class StructuralAsyncCheckpointIO(StructuralCheckpointIO):
    def wait(self) -> None:
        pass


class StructuralCollective:
    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_initialized(self) -> bool:
        return False

    def setup(self, environment: trainspec.ClusterEnvironment, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: trainspec.ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensor

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return [tensor]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        return [obj]

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        return [tensor]

    def scatter(
        self,
        tensors: list[torch.Tensor] | None,
        src: int = 0,
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: trainspec.ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensors[0]

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return tensors

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        pass


class StructuralClusterEnvironment:
    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

    @property
    def main_port(self) -> int:
        return 29500

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    def validate(self) -> None:
        pass

    def teardown(self) -> None:
        pass


class StructuralLauncher:
    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        return function(*args, **kwargs)


class StructuralStrategy:
    @property
    def accelerator(self) -> trainspec.Accelerator:
        return StructuralAccelerator()

    @property
    def precision(self) -> trainspec.Precision:
        return StructuralPrecision()

    @property
    def checkpoint_io(self) -> trainspec.CheckpointIO:
        return StructuralCheckpointIO()

    @property
    def cluster_environment(self) -> trainspec.ClusterEnvironment:
        return StructuralClusterEnvironment()

    @property
    def launcher(self) -> trainspec.Launcher | None:
        return None

    @property
    def root_device(self) -> torch.device:
        raise NotImplementedError

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return True

    def setup_environment(self) -> None:
        pass

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    def teardown(self) -> None:
        pass

    def module_init_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def batch_to_device(self, batch: _T) -> _T:
        return batch

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        return dataloader

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        pass

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        return True

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        raise NotImplementedError

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: trainspec.ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensor

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return [tensor]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        pass

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        return decision

    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {}

    def load_module_state_dict(
        self,
        module: torch.nn.Module,
        state_dict: Mapping[str, torch.Tensor],
        strict: bool = True,
    ) -> None:
        pass

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> trainspec.StateDict:
        return {}

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        pass

    def save_checkpoint(
        self,
        checkpoint: trainspec.Checkpoint,
        path: trainspec.PathLike,
        storage_options: trainspec.StorageOptions = None,
    ) -> None:
        pass

    def load_checkpoint(self, path: trainspec.PathLike) -> trainspec.Checkpoint:
        return {}

    def remove_checkpoint(self, path: trainspec.PathLike) -> None:
        pass


class StructuralBackwardSyncControl:
    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        return nullcontext()


class StructuralShardedModuleContext:
    def sharded_module_context(self) -> AbstractContextManager[None]:
        return nullcontext()


class StructuralStepBoundary:
    def mark_step(self) -> None:
        pass


# protocol -> its minimal structural implementation
IMPLEMENTATIONS: dict[type, type] = {
    trainspec.Accelerator: StructuralAccelerator,
    trainspec.Precision: StructuralPrecision,
    trainspec.CheckpointIO: StructuralCheckpointIO,
    trainspec.AsyncCheckpointIO: StructuralAsyncCheckpointIO,
    trainspec.Collective: StructuralCollective,
    trainspec.ClusterEnvironment: StructuralClusterEnvironment,
    trainspec.Launcher: StructuralLauncher,
    trainspec.Strategy: StructuralStrategy,
    trainspec.BackwardSyncControl: StructuralBackwardSyncControl,
    trainspec.ShardedModuleContext: StructuralShardedModuleContext,
    trainspec.StepBoundary: StructuralStepBoundary,
}
# An implementation of the key is also an instance of these protocols, and of no other. A
# Strategy has every CheckpointIO member *name* (save/load/remove_checkpoint, teardown), so the
# name-only run-time check accepts it as a CheckpointIO although the static types differ
# (load_checkpoint has no map_location): never dispatch on isinstance between these protocols.
ALSO: dict[type, set[type]] = {
    trainspec.AsyncCheckpointIO: {trainspec.CheckpointIO},
    trainspec.Strategy: {trainspec.CheckpointIO},
}

MEMBER_CASES = [
    pytest.param(protocol, member, id=f"{protocol.__name__}.{member}")
    for protocol in IMPLEMENTATIONS
    for member in sorted(protocol.__abstractmethods__)
]


def _namespace(implementation: type, without: str | None = None) -> dict[str, object]:
    """The members ``implementation`` defines or inherits from its structural bases."""
    namespace: dict[str, object] = {}
    for cls in reversed(implementation.__mro__[:-1]):  # not object
        namespace.update({k: v for k, v in vars(cls).items() if not k.startswith("__")})
    namespace.pop(without, None) if without else None
    return namespace


@pytest.mark.parametrize("protocol", list(IMPLEMENTATIONS), ids=lambda p: p.__name__)
def test_a_structural_implementation_is_an_instance_of_exactly_its_protocols(
    protocol: type,
) -> None:
    instance = IMPLEMENTATIONS[protocol]()
    matches = {other for other in IMPLEMENTATIONS if isinstance(instance, other)}
    assert matches == {protocol} | ALSO.get(protocol, set())


@pytest.mark.parametrize(("protocol", "member"), MEMBER_CASES)
def test_an_object_missing_a_member_is_not_an_instance(protocol: type, member: str) -> None:
    incomplete = type(f"Without_{member}", (), _namespace(IMPLEMENTATIONS[protocol], member))
    assert isinstance(
        type(f"Complete_{member}", (), _namespace(IMPLEMENTATIONS[protocol]))(), protocol
    )
    assert not isinstance(incomplete(), protocol)


@pytest.mark.parametrize(("protocol", "member"), MEMBER_CASES)
def test_an_explicit_subclass_missing_a_member_cannot_be_instantiated(
    protocol: type, member: str
) -> None:
    complete = type(
        f"Explicit{protocol.__name__}", (protocol,), _namespace(IMPLEMENTATIONS[protocol])
    )
    assert isinstance(complete(), protocol)
    incomplete = type(
        f"Explicit{protocol.__name__}Without_{member}",
        (protocol,),
        _namespace(IMPLEMENTATIONS[protocol], member),
    )
    with pytest.raises(TypeError, match=member):
        incomplete()


ERROR_NAMES = list(errors.__all__)

BUILTIN_BASES = [
    (errors.ConfigurationError, ValueError),
    (errors.UnsupportedError, errors.ConfigurationError),
    (errors.UnsupportedError, ValueError),
    (errors.DeviceUnavailableError, RuntimeError),
    (errors.LifecycleError, RuntimeError),
    (errors.CheckpointNotFoundError, FileNotFoundError),
    (errors.CheckpointNotFoundError, errors.CheckpointError),
    (errors.CheckpointCorruptedError, errors.CheckpointError),
    (errors.UnsafeCheckpointError, errors.CheckpointError),
    (errors.CheckpointWriteError, OSError),
    (errors.CheckpointWriteError, errors.CheckpointError),
    (errors.CollectiveError, RuntimeError),
    (errors.CollectiveTimeoutError, TimeoutError),
    (errors.CollectiveTimeoutError, errors.CollectiveError),
    (errors.PeerFailureError, errors.CollectiveError),
    (errors.LaunchError, RuntimeError),
]


@pytest.mark.parametrize(
    ("error", "base"), BUILTIN_BASES, ids=lambda c: c.__name__ if isinstance(c, type) else ""
)
def test_errors_are_also_the_builtin_exceptions_callers_catch(error: type, base: type) -> None:
    assert issubclass(error, base)
    with pytest.raises(base):
        raise error("message")


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_is_a_trainspec_error_exported_from_the_package(name: str) -> None:
    error = getattr(errors, name)
    assert issubclass(error, errors.TrainspecError)
    assert getattr(trainspec, name) is error


def test_errors_that_are_not_oserrors_stay_apart() -> None:
    """``except OSError`` must not swallow a corrupted or unsafe checkpoint, a timeout or a
    configuration mistake (TimeoutError and FileNotFoundError are OSErrors)."""
    for error in (
        errors.CheckpointCorruptedError,
        errors.UnsafeCheckpointError,
        errors.ConfigurationError,
        errors.LifecycleError,
    ):
        assert not issubclass(error, OSError), error


TREE_LINE = re.compile(r"^(?P<prefix>[ │├└─]*)(?P<name>[A-Z]\w*Error)\b(?P<rest>.*)$")


def _tree(drawing: str) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """``name -> (parent, also-bases)`` from a hierarchy drawn as in the errors docstring."""
    found: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    stack: list[str] = []
    root_indent: int | None = None
    for line in drawing.splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        indent = len(match["prefix"])
        root_indent = indent if root_indent is None else root_indent
        depth = (indent - root_indent) // 4
        del stack[depth:]
        also = re.search(r"\(also (\w+)\)", match["rest"])
        found[match["name"]] = (stack[-1] if stack else None, (also[1],) if also else ())
        stack.append(match["name"])
    return found


def test_the_hierarchy_drawn_in_the_errors_docstring_is_the_real_one() -> None:
    assert errors.__doc__ is not None
    drawn = _tree(errors.__doc__)
    assert set(drawn) == set(ERROR_NAMES)
    assert drawn["UnsupportedError"] == ("ConfigurationError", ())
    for name, (parent, also) in drawn.items():
        error = getattr(errors, name)
        trainspec_bases = [b for b in error.__bases__ if b.__module__ == errors.__name__]
        other_bases = [b.__name__ for b in error.__bases__ if b.__module__ != errors.__name__]
        assert [b.__name__ for b in trainspec_bases] == ([parent] if parent else [])
        assert tuple(b for b in other_bases if b != "Exception") == also, name


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_errors_survive_pickling_across_processes(name: str) -> None:
    error = getattr(errors, name)
    original = (
        error("what was wrong; allowed: a, b")
        if name != "LaunchError"
        else error("rank 1 failed", rank=1)
    )
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is error and str(copy) == str(original)
    if name == "LaunchError":
        assert copy.rank == 1
