"""``trainspec demo --strategy fsdp --devices 2``: FSDP on two ranks trains, saves a sharded
checkpoint halfway through its DCPCheckpointIO, resumes in a fresh strategy and ends bit for
bit where the straight run ended; the checkpoint loads in one process (DCKPT-5)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from trainspec.reference.checkpoint_io.distributed import POINTER, DCPCheckpointIO

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.distributed

CHECKPOINT = re.compile(r"^checkpoint\s*: (.+)$", re.M)


def test_fsdp_demo_resumes_a_sharded_checkpoint_bit_for_bit(tmp_path: Path) -> None:
    # A real command: the demo's launcher re-runs the command line on each rank, which under
    # pytest would be pytest itself.
    command = [
        os.path.join(os.path.dirname(sys.executable), "trainspec"),
        "demo",
        "--strategy",
        "fsdp",
        "--devices",
        "2",
        "--steps",
        "8",
        "--checkpoint-dir",
        str(tmp_path),
        "--no-progress",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "FSDPStrategy on 2 rank(s)" in out and "DCPCheckpointIO" in out, out
    assert "identical" in out, out
    saved = CHECKPOINT.search(out)
    assert saved is not None, out
    path = saved.group(1).strip()
    assert POINTER in os.listdir(path)
    checkpoint = DCPCheckpointIO().load_checkpoint(path)
    assert checkpoint["step"] == 4
    assert set(checkpoint) >= {"model", "optimizer", "step"}
    assert checkpoint["model"]["0.weight"].dim() == 2  # complete, not a shard
