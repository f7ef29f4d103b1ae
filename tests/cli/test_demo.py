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
from trainspec.conformance import _cli_demo
from trainspec.conformance._cli_demo import in_user_words
from trainspec.reference import demo
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.demo import (
    MAX_BATCH_SIZE,
    MAX_SEED,
    MAX_STEPS,
    DemoConfig,
    DemoResult,
    LaunchedRanks,
    run_demo,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FINAL_LOSS = re.compile(r"final loss (\S+)")
STEP_LOSS = re.compile(r"^\s*step (\d+)/(\d+)\s+loss (\S+)", re.M)
CHECKPOINT = re.compile(r"^checkpoint\s*: (.+)$", re.M)
_STRIPPED = ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID", "GROUP_RANK", "NODE_RANK")


def _losses(out: str) -> tuple[float, float]:
    found = [float(value) for value in FINAL_LOSS.findall(out)]
    assert len(found) == 2, out
    return found[0], found[1]


def _assert_step_lines_agree_with_the_summary(out: str) -> None:
    """The log line of each phase's last step shows the loss the summary reports (rounded as
    the log line rounds it): the straight run's last line, and the resumed run's."""
    straight, resumed = _losses(out)
    last_lines = [
        float(loss) for step, stop, loss in STEP_LOSS.findall(out) if step == stop
    ]  # straight, first half, resume
    assert len(last_lines) == 3, out
    assert last_lines[0] == pytest.approx(straight, abs=5e-7), out
    assert last_lines[2] == pytest.approx(resumed, abs=5e-7), out


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
    _assert_step_lines_agree_with_the_summary(result.out)
    assert "removed" not in result.out and os.path.exists(path)  # a directory given is kept


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


@pytest.fixture
def temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system's temporary directory, as the demo sees it: an empty one of this test's."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(directory))
    return directory


def _demo_directories(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith("trainspec-demo-")]


def test_run_demo_removes_its_temporary_checkpoint_directory(temporary_directory: Path) -> None:
    result = run_demo(DemoConfig(accelerator="cpu", steps=2, progress="none"))
    directory = os.path.dirname(result.checkpoint_path)
    assert os.path.dirname(directory) == str(temporary_directory)
    assert os.path.basename(directory).startswith("trainspec-demo-")
    assert not result.checkpoint_kept
    assert _demo_directories(temporary_directory) == []


def test_run_demo_keeps_the_temporary_checkpoint_directory_when_asked(
    temporary_directory: Path,
) -> None:
    result = run_demo(DemoConfig(accelerator="cpu", steps=2, progress="none", keep_checkpoint=True))
    assert result.checkpoint_kept
    assert _demo_directories(temporary_directory) == [
        os.path.basename(os.path.dirname(result.checkpoint_path))
    ]
    assert os.listdir(os.path.dirname(result.checkpoint_path)) == ["demo-step-1.ckpt"]


def test_demo_command_says_whether_it_kept_the_checkpoint(
    trainspec_cli: Callable[..., Any], temporary_directory: Path
) -> None:
    argv = ("demo", "--accelerator", "cpu", "--steps", "2", "--no-progress")
    removed = trainspec_cli(*argv)
    assert removed.code == 0, removed.err
    assert "--keep-checkpoint keeps it" in removed.out
    assert _demo_directories(temporary_directory) == []
    kept = trainspec_cli(*argv, "--keep-checkpoint")
    assert kept.code == 0, kept.err
    saved = CHECKPOINT.search(kept.out)
    assert saved is not None and "removed" not in saved.group(1), kept.out
    assert os.path.exists(saved.group(1).strip())


def test_run_demo_removes_its_temporary_directory_when_training_fails(
    temporary_directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise ConfigurationError("demo: the checkpoint could not be saved; valid: none")

    monkeypatch.setattr("trainspec.reference.runner.Runner.save", fail)
    with pytest.raises(ConfigurationError):
        run_demo(DemoConfig(accelerator="cpu", steps=2, progress="none"))
    assert _demo_directories(temporary_directory) == []


def test_run_demo_trains_at_the_largest_batch_and_seed() -> None:
    # The data is made batch by batch: nothing of size steps * batch_size is allocated.
    result = run_demo(
        DemoConfig(
            accelerator="cpu",
            steps=2,
            batch_size=MAX_BATCH_SIZE,
            seed=MAX_SEED,
            progress="none",
        )
    )
    assert result.identical


def test_demo_data_is_made_lazily_and_depends_only_on_the_seed_and_the_index() -> None:
    data = demo._SyntheticData(MAX_SEED, MAX_STEPS * MAX_BATCH_SIZE * 1024)  # never allocated
    assert len(data) == MAX_STEPS * MAX_BATCH_SIZE * 1024
    batch = data.__getitems__([5, 10**12, 7])
    alone = data[10**12]
    assert torch.equal(batch[1][0], alone[0]) and torch.equal(batch[1][1], alone[1])
    assert not torch.equal(batch[0][0], batch[2][0])
    other_seed = demo._SyntheticData(0, 16)[5]
    assert not torch.equal(other_seed[0], batch[0][0])


def test_demo_help_states_the_ranges_the_config_enforces() -> None:
    assert (_cli_demo._MAX_STEPS, _cli_demo._MAX_BATCH_SIZE) == (MAX_STEPS, MAX_BATCH_SIZE)


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
        {"keep_checkpoint": "yes"},
    ],
)
def test_demo_config_refuses_invalid_values(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        DemoConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"steps": MAX_STEPS + 1}, "steps must be an int from 2 to 1000000"),
        ({"steps": 10**12}, "steps must be an int from 2 to 1000000"),
        ({"batch_size": 10**9}, "batch_size must be an int from 1 to 65536"),
        ({"seed": 2**70}, "seed must be an int from 0 to 18446744073709551615"),
        ({"seed": -1}, "seed must be an int from 0 to 18446744073709551615"),
    ],
)
def test_demo_config_refuses_numbers_out_of_range_naming_the_range(
    changes: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        DemoConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [{"steps": MAX_STEPS}, {"batch_size": MAX_BATCH_SIZE}, {"seed": MAX_SEED}, {"seed": 0}],
)
def test_demo_config_accepts_the_edges_of_each_range(changes: dict[str, object]) -> None:
    DemoConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "resolve(): precision must be one of trainspec.PRECISION_FLAGS ('32-true')",
            "--precision must be one of trainspec.PRECISION_FLAGS ('32-true')",
        ),
        (
            "resolve(): devices=0 is not a valid cpu device request",
            "--devices 0 is not a valid cpu device request",
        ),
        (
            "resolve(): accelerator 'xla' is not available on this machine",
            "--accelerator 'xla' is not available on this machine",
        ),
        (
            "demo: batch_size must be an int from 1 to 65536",
            "--batch-size must be an int from 1 to 65536",
        ),
        (
            "no checkpoint_io named 'x' is registered",
            "--checkpoint-io: no checkpoint_io named 'x' is registered",
        ),
        ("something else entirely", "something else entirely"),
    ],
)
def test_demo_usage_errors_name_the_option_not_the_function(message: str, expected: str) -> None:
    assert in_user_words(message) == expected


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
        (["--seed", "1180591620717411303424"], "--seed must be an int from 0 to"),
        (["--batch-size", "1000000000"], "--batch-size must be an int from 1 to 65536"),
        (["--steps", str(10**12)], "--steps must be an int from 2 to 1000000"),
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
    assert "resolve()" not in line and "demo: " not in line.removeprefix("trainspec demo: ")


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--precision", "8-true"], "--precision"),
        (["--checkpoint-io", "nope"], "--checkpoint-io"),
        (["--strategy", "nope"], "--strategy"),
        (["--accelerator", "nope"], "--accelerator"),
        (["--devices", "0"], "--devices"),
        (["--steps", "1"], "--steps"),
    ],
)
def test_demo_usage_errors_speak_of_the_option_given(
    trainspec_cli: Callable[..., Any],
    usage_error: Callable[..., str],
    argv: list[str],
    option: str,
) -> None:
    line = usage_error(trainspec_cli("demo", "--accelerator", "cpu", *argv), "demo")
    assert line.startswith(f"trainspec demo: error: {option}"), line


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
    # Every printed loss is the mean over both ranks, as the summary's is.
    _assert_step_lines_agree_with_the_summary(out)
