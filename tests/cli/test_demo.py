"""``trainspec demo`` and ``trainspec.reference.demo``: train, save halfway, resume exactly."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
import torch

from trainspec import ConfigurationError
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.demo import DemoConfig, DemoResult, LaunchedRanks, run_demo
from trainspec.reference.environments.local import LocalEnvironment

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FINAL_LOSS = re.compile(r"final loss (\S+)")
CHECKPOINT = re.compile(r"^checkpoint\s*: (.+)$", re.M)
_STRIPPED = ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID", "GROUP_RANK", "NODE_RANK")


def _losses(out: str) -> tuple[float, float]:
    found = [float(value) for value in FINAL_LOSS.findall(out)]
    assert len(found) == 2, out
    return found[0], found[1]


def test_demo_resumed_run_ends_with_the_straight_runs_loss(
    trainspec_cli: Callable[..., Any], tmp_path: Path
) -> None:
    result = trainspec_cli(
        "demo",
        "--accelerator",
        "cpu",
        "--steps",
        "20",
        "--checkpoint-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert result.code == 0, result.err
    straight, resumed = _losses(result.out)
    assert straight == resumed
    assert "identical" in result.out
    saved = CHECKPOINT.search(result.out)
    assert saved is not None, result.out
    path = saved.group(1).strip()
    assert path == os.path.join(str(tmp_path), "demo-step-10.ckpt")
    checkpoint = TorchCheckpointIO().load_checkpoint(path)
    assert checkpoint["step"] == 10
    assert set(checkpoint) >= {"model", "optimizer", "step"}
    assert "step 20/20" in result.out  # the log lines of --no-progress


def test_demo_progress_bar_is_the_default(
    trainspec_cli: Callable[..., Any], tmp_path: Path
) -> None:
    result = trainspec_cli(
        "demo", "--accelerator", "cpu", "--steps", "4", "--checkpoint-dir", str(tmp_path)
    )
    assert result.code == 0, result.err
    assert "steps/s" in result.out and "4/4" in result.out
    assert "step 4/4" not in result.out  # no log lines with a bar


def test_demo_runs_with_plugin_components_by_name(
    trainspec_cli: Callable[..., Any], tmp_path: Path
) -> None:
    result = trainspec_cli(
        "demo",
        "--accelerator",
        "vcpu",
        "--checkpoint-io",
        "gzip",
        "--precision",
        "bf16-mixed",
        "--steps",
        "6",
        "--checkpoint-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert result.code == 0, result.err
    assert "VirtualCPUAccelerator" in result.out and "CompressedCheckpointIO" in result.out
    straight, resumed = _losses(result.out)
    assert straight == resumed
    with open(tmp_path / "demo-step-3.ckpt", "rb") as file:
        assert file.read(2) == b"\x1f\x8b"  # a gzip stream
    with gzip.open(tmp_path / "demo-step-3.ckpt") as file:
        assert file.read(2) == b"PK"  # holding torch.save's zip archive


def test_run_demo_returns_rank_zeros_result(tmp_path: Path) -> None:
    config = DemoConfig(
        accelerator="cpu",
        steps=6,
        precision="16-mixed",
        checkpoint_dir=str(tmp_path),
        progress="none",
    )
    result = run_demo(config)
    assert result.global_rank == 0 and result.world_size == 1
    assert result.strategy == "SingleDeviceStrategy"
    assert result.precision == "Float16MixedPrecision"
    assert result.resumed_from_step == 3 and result.steps == 6
    assert result.identical and result.resumed_matches
    assert result.straight_loss == result.resumed_loss
    assert torch.isfinite(torch.tensor(result.straight_loss))
    assert os.path.exists(result.checkpoint_path)


def test_run_demo_default_checkpoint_directory_is_a_new_temporary_one() -> None:
    result = run_demo(DemoConfig(accelerator="cpu", steps=2, progress="none"))
    directory = os.path.dirname(result.checkpoint_path)
    try:
        assert os.path.basename(directory).startswith("trainspec-demo-")
        assert os.listdir(directory) == ["demo-step-1.ckpt"]
    finally:
        os.remove(result.checkpoint_path)
        os.rmdir(directory)


def _result(**changes: object) -> DemoResult:
    fields: dict[str, Any] = {
        "straight_loss": 0.5,
        "resumed_loss": 0.5,
        "max_parameter_difference": 0.0,
        "checkpoint_path": "x",
        "steps": 4,
        "resumed_from_step": 2,
        "global_rank": 0,
        "world_size": 1,
        "strategy": "S",
        "accelerator": "A",
        "device": "cpu",
        "precision": "P",
        "checkpoint_io": "C",
        "steps_per_second": 1.0,
    }
    fields.update(changes)
    return DemoResult(**fields)


def test_demo_result_tells_identical_from_close_from_different() -> None:
    assert _result().identical and _result().resumed_matches
    close = _result(resumed_loss=0.5 * (1 + 1e-7), max_parameter_difference=1e-7)
    assert not close.identical and close.resumed_matches
    assert not _result(resumed_loss=0.6).resumed_matches
    assert not _result(max_parameter_difference=0.01).resumed_matches
    assert not _result(straight_loss=float("nan"), resumed_loss=float("nan")).resumed_matches


@pytest.mark.parametrize(
    "changes",
    [
        {"steps": 1},
        {"steps": True},
        {"batch_size": 0},
        {"learning_rate": float("inf")},
        {"learning_rate": -0.1},
        {"seed": 1.5},
        {"progress": "fancy"},
    ],
)
def test_demo_config_refuses_invalid_values(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        DemoConfig(**changes)  # type: ignore[arg-type]


def test_launched_ranks_marks_the_ranks_started_and_delegates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_PORT", "29512")
    inner = LocalEnvironment()
    launched = LaunchedRanks(inner)
    assert not inner.creates_processes_externally
    assert launched.creates_processes_externally and launched.detect()
    assert (launched.global_rank, launched.local_rank, launched.world_size) == (1, 1, 2)
    assert (launched.main_address, launched.main_port) == (inner.main_address, 29512)
    assert launched.node_rank == 0
    launched.validate()
    launched.teardown()
    launched.teardown()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--strategy", "no_such_strategy"], "no_such_strategy"),
        (["--accelerator", "no_such_accelerator"], "no_such_accelerator"),
        (["--precision", "8-true"], "8-true"),
        (["--checkpoint-io", "nope"], "nope"),
        (["--steps", "1"], "steps"),
        (["--steps", "many"], "many"),
        (["--devices", "0"], "devices"),
        (["--bogus"], "--bogus"),
    ],
)
def test_demo_bad_arguments_are_one_line_usage_errors(
    trainspec_cli: Callable[..., Any],
    usage_error: Callable[..., str],
    argv: list[str],
    needle: str,
) -> None:
    line = usage_error(trainspec_cli("demo", "--accelerator", "cpu", *argv), "demo")
    assert needle in line


def test_demo_unavailable_accelerator_is_a_usage_error(
    trainspec_cli: Callable[..., Any], usage_error: Callable[..., str]
) -> None:
    from trainspec.reference.accelerators.xla import XLAAccelerator

    if XLAAccelerator().is_available():
        pytest.skip("this machine has an XLA device")
    line = usage_error(trainspec_cli("demo", "--accelerator", "xla"), "demo")
    assert "'xla' is not available" in line


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_demo_ddp_on_two_cpu_processes_resumes_exactly(
    tmp_path: Path, command_line: Callable[..., list[str]]
) -> None:
    environment = {k: v for k, v in os.environ.items() if k not in _STRIPPED}
    environment.update(OMP_NUM_THREADS="1", COLUMNS="160")
    completed = subprocess.run(
        command_line(
            "demo",
            "--accelerator",
            "cpu",
            "--strategy",
            "ddp",
            "--devices",
            "2",
            "--steps",
            "8",
            "--checkpoint-dir",
            str(tmp_path),
            "--no-progress",
        ),
        capture_output=True,
        text=True,
        env=environment,
        timeout=540,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    out = completed.stdout
    assert "DDPStrategy on 2 rank(s)" in out
    assert out.count("straight run") == 1  # rank 1 prints nothing
    straight, resumed = _losses(out)
    assert straight == resumed
    assert "identical" in out
    assert os.listdir(tmp_path) == ["demo-step-4.ckpt"]
