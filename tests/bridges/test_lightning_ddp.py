"""Fabric DDP on 2 gloo ranks with a bridged trainspec DDPStrategy: one run, many checks.

The run is ``_lightning_ddp_script.py`` (started once per module; its ranks are started by
the trainspec strategy's own launcher through the bridge)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")
pytest.importorskip("trainspec_example")

pytestmark = pytest.mark.distributed

_SCRIPT = Path(__file__).with_name("_lightning_ddp_script.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fabric_ddp")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    completed = subprocess.run(
        [sys.executable, str(_SCRIPT), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_each_rank_sees_its_place_in_the_run(ranks: list[dict[str, Any]]) -> None:
    for rank, result in enumerate(ranks):
        assert result["global_rank"] == rank
        assert result["local_rank"] == rank
        assert result["node_rank"] == 0
        assert result["world_size"] == 2
        assert result["is_global_zero"] is (rank == 0)
        assert result["device"] == "cpu"


def test_fabric_collectives_go_through_the_trainspec_strategy(
    ranks: list[dict[str, Any]],
) -> None:
    for result in ranks:
        assert result["all_reduce_sum"] == [3.0]
        assert result["all_reduce_mean"] == [1.5]
        assert result["all_gather"] == [[1.0], [2.0]]
        assert result["broadcast"] == {"from": 1}


def test_ddp_on_two_ranks_equals_one_device_on_the_double_batch(
    ranks: list[dict[str, Any]],
) -> None:
    for result in ranks:
        for key, expected in result["single_device_2b"].items():
            got = result["uninterrupted"][key]
            assert got == pytest.approx(expected, rel=1e-5, abs=1e-6), key
    assert ranks[0]["uninterrupted"] == ranks[1]["uninterrupted"]


def test_save_then_resume_on_two_ranks_is_bit_exact_through_the_example_io(
    ranks: list[dict[str, Any]],
) -> None:
    for result in ranks:
        assert result["checkpoint_io"] == "CompressedCheckpointIO"
        assert result["file_exists_after_save"] is True  # every rank returns after the write
        assert result["loaded_step"] == 2
        assert result["resumed"] == result["uninterrupted"]


def test_setup_dataloaders_gives_disjoint_shares_covering_the_data(
    ranks: list[dict[str, Any]],
) -> None:
    shares = [set(result["data_share"]) for result in ranks]
    assert not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(range(10))


def test_no_backward_sync_leaves_each_ranks_own_gradient(ranks: list[dict[str, Any]]) -> None:
    assert ranks[0]["unsynced_grad"] != ranks[1]["unsynced_grad"]
