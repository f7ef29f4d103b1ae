"""One rank of the kill-mid-save test (``test_dcp_kill.py``); not a test.

Joins a gloo group from the environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), binds a DCPCheckpointIO to it and saves sharded checkpoints to ``argv[1]``
forever: save ``k`` holds tensors whose every element is ``k``, sharded along dimension 0. After
the first save, rank 0 prints ``ready``. The test kills the ranks at a random moment.
"""

from __future__ import annotations

import sys

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from trainspec.reference.checkpoint_io.distributed import DCPCheckpointIO
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.collectives.torch_dist import TorchCollective


def main() -> None:
    path = sys.argv[1]
    torch.set_num_threads(1)
    collective = TorchCollective()
    collective.setup(LocalEnvironment(), torch.device("cpu"))
    io = DCPCheckpointIO()
    io.setup(collective)
    mesh = init_device_mesh("cpu", (collective.world_size,))
    step = 0
    while True:
        part = {
            f"w{i}": distribute_tensor(torch.full((512, 1024), float(step)), mesh, [Shard(0)])
            for i in range(4)
        }
        io.save_checkpoint({"step": step, "tensors": part}, path)
        if step == 0 and collective.rank == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
