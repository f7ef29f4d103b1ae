"""Hints fit the failure (issue 15): "add method X" for a missing member, the signature advice
only for a signature problem, pickle advice only for pickle formats, and "declare fewer
capabilities" only when the implementation refused a value rather than crashed on it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance._helpers import refusal_or_bug_hint
from trainspec.conformance.core import CheckFailure, Target, checks_for
from trainspec.conformance.structure import check_structure
from trainspec.reference.checkpoint_io import SafetensorsCheckpointIO, TorchCheckpointIO

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, MapLocation, PathLike

from tests.conformance.faults.faults_checkpoint_io import FLAT, FULL, RawDecodeErrorTorchIO
from trainspec import ClusterEnvironment

SIGNATURE_ADVICE = "extra parameters need defaults"


class _Env:
    def detect(self) -> bool:
        return True

    creates_processes_externally = False
    main_address = "127.0.0.1"
    main_port = 29500
    world_size = 1
    global_rank = 0
    local_rank = 0
    node_rank = 0

    def validate(self) -> None:
        return None


class MissingTeardownEnv(_Env):
    """No teardown at all."""


class NarrowTeardownEnv(_Env):
    def teardown(self, force: bool) -> None:  # a required parameter the protocol never passes
        return None


def _messages(obj: object) -> dict[str, str]:
    return {v.member: v.message for v in check_structure(obj, [ClusterEnvironment])}


def test_a_missing_member_says_add_it_without_the_signature_advice() -> None:
    message = _messages(MissingTeardownEnv())["teardown"]

    assert "Add the method teardown() to MissingTeardownEnv." in message
    assert SIGNATURE_ADVICE not in message


def test_a_signature_problem_keeps_the_signature_advice() -> None:
    message = _messages(NarrowTeardownEnv())["teardown"]

    assert SIGNATURE_ADVICE in message
    assert "Add the method" not in message


def test_refusals_suggest_declaring_less_and_bugs_do_not() -> None:
    refusal = refusal_or_bug_hint(TypeError("cannot store a set"), "declare fewer capabilities")
    bug = refusal_or_bug_hint(KeyError("weight"), "declare fewer capabilities")

    assert "declare fewer capabilities" in refusal
    assert "fewer capabilities" not in bug
    assert "KeyError" in bug and "bug" in bug


class KeyErrorTorchIO(TorchCheckpointIO):
    """A plain bug: saving any checkpoint with a tensor raises KeyError."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: object = None
    ) -> None:
        raise KeyError("state")


class RawDecodeErrorSafetensorsIO(SafetensorsCheckpointIO):
    """A non-pickle format whose load lets the decoder's own errors escape."""

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        from safetensors.torch import load_file

        if os.path.isdir(path):
            raise IsADirectoryError(path)
        return dict(load_file(os.fspath(path)))


def _failure(name: str, target: Target[object]) -> CheckFailure:
    check = {c.name: c for c in checks_for("checkpoint_io")}[name]
    with pytest.raises(CheckFailure) as caught:
        check.run(target)
    return caught.value


def test_a_plain_bug_in_the_round_trip_is_not_told_to_declare_fewer_capabilities() -> None:
    target = Target(
        "checkpoint_io", KeyErrorTorchIO, capabilities=FULL, options={"max_examples": 3}
    )

    hint = _failure("check_checkpoint_io_round_trips_generated_checkpoints", target).hint

    assert "bug to fix" in hint
    assert "fewer capabilities" not in hint


def test_corrupted_file_advice_names_pickle_only_for_pickle_formats() -> None:
    name = "check_checkpoint_io_corrupted_file_raises_corrupted_error"
    pickle_hint = _failure(
        name, Target("checkpoint_io", RawDecodeErrorTorchIO, capabilities=FULL)
    ).hint
    flat_hint = _failure(
        name, Target("checkpoint_io", RawDecodeErrorSafetensorsIO, capabilities=FLAT)
    ).hint

    assert "UnpicklingError" in pickle_hint
    assert "UnpicklingError" not in flat_hint
    assert "zip reader" not in flat_hint
