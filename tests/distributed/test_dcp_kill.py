"""A sharded save killed on any rank at any moment leaves the previous checkpoint or the new
one, never a mix, and the next save leaves only one committed save (DCKPT-2).

Each trial starts its own two ranks (they are killed, so the shared test world cannot be used)
that save sharded checkpoints in a loop, kills one rank with SIGKILL after a random delay and
then the other, and loads the path in this process.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed.conftest import free_port
from trainspec.reference.checkpoint_io.distributed import POINTER, DCPCheckpointIO

pytestmark = pytest.mark.distributed

RANK_SCRIPT = Path(__file__).parent / "dcp_kill_rank.py"
TRIALS = 4


def _start(path: Path) -> list[subprocess.Popen[str]]:
    environment = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
    }
    return [
        subprocess.Popen(
            [sys.executable, str(RANK_SCRIPT), str(path)],
            env={**environment, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for rank in range(2)
    ]


def _assert_one_consistent_save(path: Path) -> int:
    loaded = DCPCheckpointIO().load_checkpoint(path)
    step = loaded["step"]
    assert isinstance(step, int)
    for name, tensor in loaded["tensors"].items():
        assert tensor.shape == (512, 1024), name
        assert torch.equal(tensor, torch.full((512, 1024), float(step))), (name, step)
    return step


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_save_killed_on_any_rank_leaves_the_old_or_the_new_checkpoint(
    tmp_path: Path, trial: int
) -> None:
    path = tmp_path / "ckpt"
    ranks = _start(path)
    try:
        assert ranks[0].stdout is not None
        assert ranks[0].stdout.readline().strip() == "ready"
        generator = random.Random(trial)
        try:
            ranks[0].wait(generator.uniform(0.0, 1.5))
        except subprocess.TimeoutExpired:
            pass
        victim = ranks[trial % 2]
        victim.send_signal(signal.SIGKILL)
    finally:
        for process in ranks:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    _assert_one_consistent_save(path)
    DCPCheckpointIO().save_checkpoint({"step": -1, "tensors": {}}, path)
    assert sorted(os.listdir(path))[0] == POINTER and len(os.listdir(path)) == 2
