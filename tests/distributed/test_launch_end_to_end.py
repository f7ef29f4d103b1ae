"""The same DDP training script runs under torchrun (the environment is detected, no
launcher) and as a plain script (the strategy's launcher starts the second rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("train_script.py")
_RANK_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
)


def run(
    command: list[str], outdir: Path, *, warnings_are_errors: bool = False
) -> list[dict[str, object]]:
    environment = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    if warnings_are_errors:  # inherited by every rank the script starts
        environment["PYTHONWARNINGS"] = "error"
    completed = subprocess.run(
        [*command, str(SCRIPT), str(outdir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return [json.loads((outdir / f"rank-{rank}.json").read_text()) for rank in range(2)]


def check_reports(reports: list[dict[str, object]], environment: str, launcher: object) -> None:
    for rank, report in enumerate(reports):
        assert report["rank"] == rank
        assert report["world"] == 2
        assert report["environment"] == environment
        assert report["launcher"] == launcher
        assert report["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert isinstance(report["difference"], float) and report["difference"] < 1e-5


def test_torchrun_trains_with_an_unchanged_ddp_strategy(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    reports = run([*command, "--nproc-per-node", "2"], tmp_path)
    check_reports(reports, "TorchElasticEnvironment", None)


def test_a_plain_script_launches_its_own_second_rank(tmp_path: Path) -> None:
    reports = run([sys.executable], tmp_path, warnings_are_errors=True)
    check_reports(reports, "LocalEnvironment", "SubprocessScriptLauncher")
