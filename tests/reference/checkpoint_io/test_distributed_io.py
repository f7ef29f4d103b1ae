"""DCPCheckpointIO on one rank: the on-disk layout and its commit pointer, safe loading of DCP
metadata and of the skeleton (DCKPT-3), plain ``dcp.save`` directories, refused paths and
options, and binding to a collective (DCKPT-7). The two-rank rules are tested in
``tests/distributed/test_fsdp.py`` and by the kit (``tests/conformance/distributed``); the
CKPT-1 ... CKPT-13 rules on one rank by ``trainspec verify checkpoint_io ...:DCPCheckpointIO``
(a row of the verify matrix)."""

from __future__ import annotations

import os
import pickle
import warnings
from typing import TYPE_CHECKING

import pytest
import torch
import torch.distributed.checkpoint as dcp

from trainspec import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    DistributedCheckpointIO,
    UnsafeCheckpointError,
    UnsupportedError,
)
from trainspec.conformance import verify
from trainspec.conformance.report import FAILING_STATUSES
from trainspec.reference.checkpoint_io.distributed import POINTER, SKELETON, DCPCheckpointIO
from trainspec.reference.collectives.single import SingleProcessCollective

if TYPE_CHECKING:
    from pathlib import Path

CALLS: list[str] = []


class _Recorder:
    """Unpickling it records a call: proof that a load ran code from the file."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (CALLS.append, ("ran",))


def _checkpoint() -> dict[str, object]:
    return {
        "w": torch.arange(6.0).reshape(2, 3),
        "nested": {"items": [1, 2.5, "x", None, (torch.ones(2, dtype=torch.bfloat16), True)]},
        "step": 4,
    }


def _plain_dcp_save(state: dict[str, object], path: Path) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, checkpoint_id=str(path), no_dist=True)


def test_the_io_is_a_distributed_checkpoint_io() -> None:
    assert isinstance(DCPCheckpointIO(), DistributedCheckpointIO)


def test_on_one_rank_it_passes_the_checkpoint_io_kit() -> None:
    # Every CKPT clause, the SIGKILL-mid-save trials of CKPT-3 included (DCKPT-2 on one
    # rank); not a row of the verify matrix, whose DCKPT checks run through the fsdp row.
    report = verify(("checkpoint_io", DCPCheckpointIO))
    failing = [r for r in report.results if r.status in FAILING_STATUSES]
    assert not failing, "\n".join(f"{r.check}: {r.message}" for r in failing)
    assert report.ok
    assert {"CKPT-3", "CKPT-10", "CKPT-13"} <= {
        r.clause for r in report.results if r.status == "passed"
    }


def test_a_save_commits_one_version_behind_the_pointer_and_replaces_the_previous(
    tmp_path: Path,
) -> None:
    io = DCPCheckpointIO()
    path = tmp_path / "parents" / "ckpt"
    io.save_checkpoint(_checkpoint(), path)
    first = sorted(os.listdir(path))
    assert first[0] == POINTER and first[1].startswith("v-") and len(first) == 2
    assert SKELETON in os.listdir(path / first[1])
    io.save_checkpoint({"w": torch.zeros(1)}, path)
    second = sorted(os.listdir(path))
    assert len(second) == 2 and second[1] != first[1]
    assert torch.equal(io.load_checkpoint(path)["w"], torch.zeros(1))


def test_a_killed_first_save_leaves_no_checkpoint_and_the_next_save_cleans_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ckpt"
    (path / ".staging-deadbeef").mkdir(parents=True)
    with pytest.raises(CheckpointNotFoundError):
        DCPCheckpointIO().load_checkpoint(path)
    DCPCheckpointIO().save_checkpoint({"w": torch.ones(1)}, path)
    assert not any(entry.startswith(".staging-") for entry in os.listdir(path))


def test_unsafe_dcp_metadata_is_refused_without_running_it(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    io = DCPCheckpointIO()
    io.save_checkpoint(_checkpoint(), path)
    version = next(entry for entry in os.listdir(path) if entry.startswith("v-"))
    (path / version / ".metadata").write_bytes(pickle.dumps(_Recorder()))
    CALLS.clear()
    with pytest.raises(UnsafeCheckpointError, match=str(path)):
        io.load_checkpoint(path)
    assert CALLS == []


def test_an_unsafe_skeleton_is_refused_without_running_it(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    io = DCPCheckpointIO()
    io.save_checkpoint(_checkpoint(), path)
    version = next(entry for entry in os.listdir(path) if entry.startswith("v-"))
    torch.save({"l": [_Recorder()]}, path / version / SKELETON)
    CALLS.clear()
    with pytest.raises(UnsafeCheckpointError, match=str(path)):
        io.load_checkpoint(path)
    assert CALLS == []


def test_a_plain_dcp_directory_loads_and_its_pickled_objects_need_an_opt_in(
    tmp_path: Path,
) -> None:
    tensors = tmp_path / "tensors"
    _plain_dcp_save({"a": torch.arange(3.0), "b": torch.ones(2, 2)}, tensors)
    loaded = DCPCheckpointIO().load_checkpoint(tensors)
    assert torch.equal(loaded["a"], torch.arange(3.0)) and torch.equal(
        loaded["b"], torch.ones(2, 2)
    )
    objects = tmp_path / "objects"
    _plain_dcp_save({"a": torch.arange(3.0), "note": {"lr": 0.1}}, objects)
    with pytest.raises(UnsafeCheckpointError, match="weights_only=False"):
        DCPCheckpointIO().load_checkpoint(objects)
    trusted = DCPCheckpointIO(weights_only=False).load_checkpoint(objects)
    assert torch.equal(trusted["a"], torch.arange(3.0))


def test_missing_and_damaged_checkpoints_raise_the_checkpoint_errors(tmp_path: Path) -> None:
    io = DCPCheckpointIO()
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"not a directory")
    with pytest.raises(CheckpointCorruptedError, match="directory"):
        io.load_checkpoint(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointCorruptedError):
        io.load_checkpoint(tmp_path / "empty")
    path = tmp_path / "ckpt"
    io.save_checkpoint(_checkpoint(), path)
    (path / POINTER).write_text("{not json")
    with pytest.raises(CheckpointCorruptedError, match=POINTER):
        io.load_checkpoint(path)


def test_values_outside_the_value_set_raise_type_error_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with pytest.raises(TypeError, match="object"):
        DCPCheckpointIO().save_checkpoint({"x": object()}, path)
    assert not path.exists()


def test_urls_options_and_removal_of_special_files_are_refused(tmp_path: Path) -> None:
    io = DCPCheckpointIO()
    with pytest.raises(UnsupportedError, match="local paths"):
        io.save_checkpoint({"x": torch.ones(1)}, "memory://ckpt")
    with pytest.raises(TypeError, match="endpoint_url"):
        io.save_checkpoint({"x": torch.ones(1)}, tmp_path / "c", {"endpoint_url": "x"})
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(CheckpointWriteError, match="regular file"):
        io.remove_checkpoint(tmp_path / "file")
    assert (tmp_path / "file").exists()
    io.remove_checkpoint(tmp_path / "never-saved")


def test_binding_needs_torch_distributed_for_more_than_one_rank() -> None:
    io = DCPCheckpointIO()
    one = SingleProcessCollective()
    io.setup(one)
    io.setup(one)
    assert io.world_size == 1
    io.teardown()
    io.teardown()

    class TwoRanks(SingleProcessCollective):
        @property
        def world_size(self) -> int:
            return 2

    with pytest.raises(UnsupportedError, match="process group"):
        io.setup(TwoRanks())
    assert io.world_size == 1


def test_bad_constructor_arguments_name_the_valid_values() -> None:
    with pytest.raises(UnsupportedError, match=">= 1"):
        DCPCheckpointIO(thread_count=0)
    with pytest.raises(TypeError, match="bool"):
        DCPCheckpointIO(weights_only="yes")  # type: ignore[arg-type]


def test_a_load_outlasting_many_commits_is_not_starved(tmp_path: Path) -> None:
    # A reader slower than a writer saving back to back: every read of the committed save
    # races a new commit (which removes the save being read). The load follows the pointer
    # for as long as commits keep coming, and returns the save it finally reads whole.
    path = tmp_path / "ckpt"
    writer = DCPCheckpointIO()
    writer.save_checkpoint({"w": torch.zeros(3)}, path)
    read = DCPCheckpointIO._load_version
    raced: list[int] = []

    class SlowReader(DCPCheckpointIO):
        def _load_version(self, where, version, map_location):  # type: ignore[no-untyped-def]
            if len(raced) < 20:  # far more commits than any fixed number of tries
                raced.append(len(raced))
                # The commit removes the save this read was about to read.
                writer.save_checkpoint({"w": torch.full((3,), float(len(raced)))}, path)
                assert not os.path.exists(version)
            return read(self, where, version, map_location)

    loaded = SlowReader().load_checkpoint(path)
    assert len(raced) == 20
    assert torch.equal(loaded["w"], torch.full((3,), 20.0))


def test_a_damaged_save_still_fails_after_no_new_commit(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    DCPCheckpointIO().save_checkpoint(_checkpoint(), path)
    committed = next(e for e in os.listdir(path) if e.startswith("v-"))
    os.remove(path / committed / SKELETON)
    with pytest.raises(CheckpointCorruptedError, match="skeleton"):
        DCPCheckpointIO().load_checkpoint(path)
