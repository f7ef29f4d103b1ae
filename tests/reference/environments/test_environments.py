"""The reference cluster environments read their variables exactly and refuse bad ones."""

from __future__ import annotations

import importlib.util

import pytest

from trainspec import ClusterEnvironment, ConfigurationError, DeviceUnavailableError
from trainspec.reference.cluster_environments import (
    DETECTION_ORDER,
    LocalEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
    XLAEnvironment,
    detect_environment,
    first_host,
)
from trainspec.reference.cluster_environments.slurm import PORT_BASE

_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
)

_TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
}

_SLURM = {
    "SLURM_NTASKS": "8",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_NODELIST": "gpu[007-010,012],login1",
    "SLURM_JOB_ID": "1234567",
    "SLURM_JOB_NAME": "train",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _set(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def _describe(environment: ClusterEnvironment) -> tuple[object, ...]:
    return (
        environment.main_address,
        environment.main_port,
        environment.world_size,
        environment.global_rank,
        environment.local_rank,
        environment.node_rank,
    )


@pytest.mark.parametrize("cls", [LocalEnvironment, TorchElasticEnvironment, SLURMEnvironment])
def test_every_environment_is_an_explicit_cluster_environment(cls: type) -> None:
    assert ClusterEnvironment in cls.__mro__
    assert isinstance(cls(), ClusterEnvironment)


# -- LocalEnvironment ----------------------------------------------------------------------


def test_local_environment_without_variables_is_one_rank_with_a_stable_free_port() -> None:
    environment = LocalEnvironment()
    assert environment.detect() is True
    assert environment.creates_processes_externally is False
    assert (environment.world_size, environment.global_rank) == (1, 0)
    assert (environment.local_rank, environment.node_rank) == (0, 0)
    assert environment.main_address == "127.0.0.1"
    port = environment.main_port
    assert 1 <= port <= 65535
    assert environment.main_port == port
    environment.validate()


def test_local_environment_reads_the_launcher_variables_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environment = LocalEnvironment(main_address="10.1.1.1", main_port=1234)
    assert (environment.main_address, environment.main_port) == ("10.1.1.1", 1234)
    _set(
        monkeypatch,
        LocalEnvironment.variables_for(
            rank=2, local_rank=2, world_size=3, node_rank=0, address="host-a", port=4321
        ),
    )
    assert _describe(environment) == ("host-a", 4321, 3, 2, 2, 0)
    environment.validate()


def test_local_environment_local_rank_defaults_to_the_global_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(monkeypatch, {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "2000"})
    assert LocalEnvironment().local_rank == 1


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK"),
        ({"RANK": "0", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "5"}, "LOCAL_RANK"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR"),
        ({"NODE_RANK": "1.5"}, "NODE_RANK"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_PORT"),
    ],
)
def test_local_environment_validate_names_the_bad_variable(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    _set(monkeypatch, variables)
    with pytest.raises(ConfigurationError, match=named):
        LocalEnvironment().validate()


@pytest.mark.parametrize("kwargs", [{"main_address": ""}, {"main_port": 0}, {"main_port": True}])
def test_local_environment_refuses_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        LocalEnvironment(**kwargs)  # type: ignore[arg-type]


# -- TorchElasticEnvironment -----------------------------------------------------------------


def test_torchelastic_environment_reads_torchrun_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environment = TorchElasticEnvironment()
    assert environment.detect() is False
    _set(monkeypatch, _TORCHRUN)
    assert environment.detect() is True
    assert environment.creates_processes_externally is True
    assert _describe(environment) == ("10.0.0.1", 29400, 4, 3, 1, 1)
    environment.validate()


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"RANK": "4"}, "RANK"),
        ({"LOCAL_RANK": "abc"}, "LOCAL_RANK"),
        ({"LOCAL_RANK": "4"}, "LOCAL_RANK"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR"),
        ({"GROUP_RANK": None}, "GROUP_RANK"),
        ({"TORCHELASTIC_RUN_ID": ""}, "TORCHELASTIC_RUN_ID"),
    ],
)
def test_torchelastic_environment_validate_names_the_bad_variable(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, str | None], named: str
) -> None:
    _set(monkeypatch, _TORCHRUN)
    for name, value in changes.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=named):
        TorchElasticEnvironment().validate()


# -- SLURMEnvironment --------------------------------------------------------------------------


def test_slurm_environment_reads_srun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = SLURMEnvironment()
    assert environment.detect() is False
    _set(monkeypatch, _SLURM)
    assert environment.detect() is True
    assert environment.creates_processes_externally is True
    assert _describe(environment) == ("gpu007", PORT_BASE + 4567, 8, 5, 1, 2)
    environment.validate()
    monkeypatch.setenv("MASTER_ADDR", "override")
    monkeypatch.setenv("MASTER_PORT", "1111")
    assert (environment.main_address, environment.main_port) == ("override", 1111)


@pytest.mark.parametrize("job_name", ["bash", "interactive"])
def test_slurm_environment_does_not_claim_an_interactive_allocation(
    monkeypatch: pytest.MonkeyPatch, job_name: str
) -> None:
    _set(monkeypatch, {**_SLURM, "SLURM_JOB_NAME": job_name})
    assert SLURMEnvironment().detect() is False


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID"),
        ({"SLURM_NTASKS": "n"}, "SLURM_NTASKS"),
        ({"SLURM_LOCALID": "6"}, "SLURM_LOCALID"),
        ({"SLURM_NODEID": None}, "SLURM_NODEID"),
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID"),
        ({"SLURM_NODELIST": None}, "SLURM_NODELIST"),
        ({"SLURM_NODELIST": "node[1-"}, "SLURM_NODELIST"),
    ],
)
def test_slurm_environment_validate_names_the_bad_variable(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, str | None], named: str
) -> None:
    _set(monkeypatch, _SLURM)
    for name, value in changes.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=named):
        SLURMEnvironment().validate()


def test_slurm_environment_falls_back_to_the_job_nodelist(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, _SLURM)
    monkeypatch.delenv("SLURM_NODELIST")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "a1,a2")
    assert SLURMEnvironment().main_address == "a1"


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("node1", "node1"),
        ("node1,node2", "node1"),
        ("node[001-004,007]", "node001"),
        ("node[7,1-3]", "node7"),
        ("gpu[09-12]-ib,cpu1", "gpu09-ib"),
        ("rack[1-2]-n[01-04]", "rack1-n01"),
        ("  host.example.org  ", "host.example.org"),
        ("10.0.0.[5-6]", "10.0.0.5"),
    ],
)
def test_first_host_expands_the_first_entry(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize(
    "nodelist", ["", ",node1", "node[1-2", "node]1", "node[a-b]", "node[5-2]", "n[[1]]", "[]"]
)
def test_first_host_refuses_malformed_lists(nodelist: str) -> None:
    with pytest.raises(ConfigurationError, match="host list"):
        first_host(nodelist)


# -- detection -----------------------------------------------------------------------------------


def test_detection_order_is_torchelastic_then_slurm_then_local(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert DETECTION_ORDER == (TorchElasticEnvironment, SLURMEnvironment, LocalEnvironment)
    assert type(detect_environment()) is LocalEnvironment
    _set(monkeypatch, _SLURM)
    assert type(detect_environment()) is SLURMEnvironment
    _set(monkeypatch, _TORCHRUN)  # torchrun inside a SLURM allocation: torchrun started ranks
    assert type(detect_environment()) is TorchElasticEnvironment


@pytest.mark.parametrize(
    "cls", [LocalEnvironment, TorchElasticEnvironment, SLURMEnvironment, XLAEnvironment]
)
def test_detect_never_raises_on_garbage_and_teardown_is_idempotent(
    monkeypatch: pytest.MonkeyPatch, cls: type[ClusterEnvironment]
) -> None:
    _set(monkeypatch, {name: "garbage" for name in _VARIABLES})
    environment = cls()
    assert isinstance(environment.detect(), bool)
    environment.teardown()
    environment.teardown()


# -- XLAEnvironment ------------------------------------------------------------------------------

_HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None


def test_xla_environment_detects_spawned_ranks_by_variable_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PJRT_LOCAL_PROCESS_COUNT", raising=False)
    environment = XLAEnvironment()
    assert environment.detect() is False
    monkeypatch.setenv("PJRT_LOCAL_PROCESS_COUNT", "4")
    assert environment.detect() is True
    assert environment.creates_processes_externally is False
    monkeypatch.setenv("MASTER_ADDR", "10.2.2.2")
    monkeypatch.setenv("MASTER_PORT", "2345")
    assert (environment.main_address, environment.main_port) == ("10.2.2.2", 2345)


@pytest.mark.skipif(_HAS_TORCH_XLA, reason="checks the behaviour without torch_xla")
def test_xla_environment_ranks_need_torch_xla() -> None:
    with pytest.raises(DeviceUnavailableError, match="torch_xla"):
        _ = XLAEnvironment().world_size
