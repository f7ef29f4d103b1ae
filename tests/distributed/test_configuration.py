"""Configuration of TorchCollective, DDPStrategy and XLAStrategy, and the backend error
table, checked in this process (no ranks started)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from trainspec import (
    BackwardSyncControl,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    DeviceUnavailableError,
    LifecycleError,
    PeerFailureError,
    StepBoundary,
    Strategy,
    UnsupportedError,
)
from trainspec.reference.cluster_environments import (
    LocalEnvironment,
    TorchElasticEnvironment,
    XLAEnvironment,
)
from trainspec.reference.collectives.torch_dist import (
    ERROR_TABLE,
    TorchCollective,
    default_backend,
    translate_error,
)
from trainspec.reference.launchers import (
    MultiprocessingLauncher,
    SubprocessScriptLauncher,
    XLALauncher,
)
from trainspec.reference.strategies.ddp import DDPStrategy
from trainspec.reference.strategies.xla import XLAStrategy

CPU = torch.device("cpu")
_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@pytest.fixture(autouse=True)
def no_rank_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_RANK_VARIABLES, "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def test_ddp_strategy_is_an_explicit_strategy_with_backward_sync_control() -> None:
    strategy = DDPStrategy(parallel_devices=[CPU, CPU])
    assert Strategy in type(strategy).__mro__ and isinstance(strategy, BackwardSyncControl)
    assert type(strategy.cluster_environment) is LocalEnvironment
    assert isinstance(strategy.launcher, SubprocessScriptLauncher)
    assert strategy.launcher is strategy.launcher  # created once
    assert strategy.launcher.num_processes == 2


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_ddp_strategy_start_method_selects_the_multiprocessing_launcher(method: str) -> None:
    launcher = DDPStrategy(parallel_devices=[CPU] * 3, start_method=method).launcher  # type: ignore[arg-type]
    assert isinstance(launcher, MultiprocessingLauncher)
    assert (launcher.num_processes, launcher.start_method) == (3, method)


def test_ddp_strategy_has_no_launcher_under_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "TORCHELASTIC_RUN_ID": "x",
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29400",
    }.items():
        monkeypatch.setenv(name, value)
    strategy = DDPStrategy(parallel_devices=[CPU, CPU])
    assert type(strategy.cluster_environment) is TorchElasticEnvironment
    assert strategy.launcher is None


def test_ddp_setup_outside_the_launcher_names_the_mismatch() -> None:
    strategy = DDPStrategy(parallel_devices=[CPU, CPU])
    with pytest.raises(ConfigurationError, match=r"launcher\.launch"):
        strategy.setup_environment()
    assert strategy.lifecycle_state == "not_set_up"
    with pytest.raises(LifecycleError):
        strategy.process_dataloader(torch.utils.data.DataLoader(list(range(4))))


@pytest.mark.parametrize(
    "options",
    [
        {"start_method": "thread"},
        {"sampler_seed": "0"},
        {"find_unused_parameters": 1},
        {"num_nodes": 2},
        {"timeout": 5},
    ],
)
def test_ddp_strategy_refuses_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        DDPStrategy(parallel_devices=[CPU, CPU], **options)  # type: ignore[arg-type]


def test_xla_strategy_constructs_without_torch_xla_and_fails_at_setup() -> None:
    strategy = XLAStrategy()
    assert isinstance(strategy, StepBoundary) and isinstance(strategy, Strategy)
    assert strategy.launcher is None and strategy.world_size == 1
    assert strategy.parallel_devices == [torch.device("xla", 0)]
    with pytest.raises(DeviceUnavailableError):
        strategy.setup_environment()
    assert strategy.lifecycle_state == "not_set_up"
    with pytest.raises(LifecycleError):
        strategy.mark_step()


def test_xla_strategy_with_several_devices_spawns_one_rank_per_device() -> None:
    strategy = XLAStrategy(parallel_devices=[torch.device("xla", i) for i in range(4)])
    assert isinstance(strategy.launcher, XLALauncher)
    assert type(strategy.cluster_environment) is XLAEnvironment
    with pytest.raises(ConfigurationError):
        XLAStrategy(num_nodes=2)


# -- TorchCollective --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:41140"),
            PeerFailureError,
        ),
        (
            RuntimeError("Timed out waiting 2000ms for recv operation to complete"),
            CollectiveTimeoutError,
        ),
        (RuntimeError("Operation timed out!"), CollectiveTimeoutError),
        (RuntimeError("NCCL communicator was aborted on rank 1."), PeerFailureError),
        (
            RuntimeError("Watchdog caught collective operation timeout: WorkNCCL(...)"),
            CollectiveTimeoutError,
        ),
        (RuntimeError("Connection reset by peer"), PeerFailureError),
        (TimeoutError("store"), CollectiveTimeoutError),
        (ConnectionResetError("reset"), PeerFailureError),
        (RuntimeError("Tensors must be contiguous"), CollectiveError),
    ],
)
def test_backend_errors_translate_at_one_boundary(
    error: BaseException, expected: type[CollectiveError]
) -> None:
    translated = translate_error(error, "all_reduce", timedelta(seconds=3))
    assert type(translated) is expected
    assert "all_reduce" in str(translated)


@pytest.mark.parametrize(("pattern", "expected"), ERROR_TABLE)
def test_every_error_table_entry_maps_its_pattern(
    pattern: str, expected: type[CollectiveError]
) -> None:
    translated = translate_error(RuntimeError(f"x {pattern.upper()} y"), "barrier", timedelta(1))
    assert type(translated) is expected


def test_torch_collective_configuration_and_lifecycle_before_setup() -> None:
    with pytest.raises(ConfigurationError, match="backend"):
        TorchCollective(backend="")
    with pytest.raises(ConfigurationError, match="timeout"):
        TorchCollective(timeout=timedelta(0))
    assert default_backend(torch.device("cpu")) == "gloo"
    assert default_backend(torch.device("cuda", 0)) == "nccl"
    with pytest.raises(UnsupportedError, match="meta"):
        default_backend(torch.device("meta"))
    collective = TorchCollective()
    assert collective.is_initialized is False and collective.timeout == timedelta(minutes=30)
    with pytest.raises(LifecycleError):
        _ = collective.rank
    with pytest.raises(LifecycleError):
        collective.all_reduce(torch.ones(1))
    collective.teardown()  # idempotent before setup
