"""The structure layer reports every kind of mismatch, all at once, with clause IDs."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from trainspec import (
    AsyncCheckpointIO,
    CheckpointIO,
    ClusterEnvironment,
    Collective,
    Launcher,
    StepBoundary,
    Strategy,
)
from trainspec.conformance.structure import (
    check_structure,
    clause_ids,
    protocol_clause_prefix,
    protocol_members,
    protocols_for,
    signature_problems,
)


def _problems(violations: list[Any]) -> dict[str, str]:
    return {v.member: " | ".join(v.problems) for v in violations}


class BadCollective:
    """One structural mistake per member (except the ones noted as fine)."""

    @property
    def rank(self) -> int:
        raise RuntimeError("properties must not be evaluated by the structure layer")

    def world_size(self) -> int:  # a method where the protocol has a property
        return 1

    is_initialized = False  # a plain attribute satisfies a read-only property

    def setup(self, environment: object, device: object, backend: str) -> None:  # extra required
        pass

    def teardown(self) -> None:
        pass

    @property
    def all_reduce(self) -> object:  # a property where the protocol has a method
        return None

    def all_gather(self, tensor: object) -> None:  # no `timeout`, no **kwargs
        pass

    def broadcast(self, tensor: object, src: int = 1, *, timeout: object = None) -> None:
        pass  # default differs

    def broadcast_object(self, obj: object, *, src: int = 0, timeout: object = None) -> None:
        pass  # src keyword-only

    def all_gather_object(self, obj: object, /, *, timeout: object = None) -> None:
        pass  # obj positional-only

    def gather(self, dst: int = 0, tensor: object = None, *, timeout: object = None) -> None:
        pass  # order swapped

    scatter = 42  # not callable

    def reduce_scatter(
        self, tensors: object, reduce_op: str = "sum", *, timeout: object = None
    ) -> None:
        pass  # the classic drift: a different default reduction

    def all_to_all(self, tensors: object, **kwargs: object) -> None:  # fine: **kwargs
        pass

    def barrier(self, *args: object, **kwargs: object) -> None:  # fine: accepts anything
        pass


def test_every_collective_mismatch_is_reported_at_once() -> None:
    violations = check_structure(BadCollective(), [Collective])
    problems = _problems(violations)

    assert set(problems) == {
        "world_size",
        "setup",
        "all_reduce",
        "all_gather",
        "broadcast",
        "broadcast_object",
        "all_gather_object",
        "gather",
        "scatter",
        "reduce_scatter",
    }
    assert "read-only property" in problems["world_size"]
    assert "extra required parameter 'backend'" in problems["setup"]
    assert "declares a method" in problems["all_reduce"]
    assert "missing keyword parameter 'timeout'" in problems["all_gather"]
    assert "'src' defaults to 1" in problems["broadcast"]
    assert "'src' is keyword-only" in problems["broadcast_object"]
    assert "'obj' is positional-only" in problems["all_gather_object"]
    assert "'tensor' is at position 2" in problems["gather"]
    assert "'dst' is at position 1" in problems["gather"]
    assert "not callable" in problems["scatter"]
    assert "'reduce_op' defaults to 'sum'" in problems["reduce_scatter"]
    assert "'mean'" in problems["reduce_scatter"]


def test_violations_carry_the_members_clause_ids_and_a_readable_message() -> None:
    by_member = {v.member: v for v in check_structure(BadCollective(), [Collective])}

    assert by_member["all_reduce"].clauses == ("COLL-6", "COLL-7")
    assert by_member["all_reduce"].clause == "COLL-6"
    assert by_member["world_size"].clause == "COLL-4"
    message = by_member["reduce_scatter"].message
    assert message.startswith("BadCollective.reduce_scatter must accept every call to ")
    assert "Collective.reduce_scatter(tensors, reduce_op='mean', *, timeout=None)" in message
    assert "(COLL-14)" in message


class BadIO:
    def save_checkpoint(self, checkpoint: object, path: object) -> None:  # no storage_options
        pass

    def load_checkpoint(self, path: object, map_location: object) -> None:  # required
        pass

    def remove_checkpoint(self, target: object) -> None:  # renamed
        pass

    # teardown is missing


def test_checkpoint_io_missing_renamed_and_required_parameters() -> None:
    problems = _problems(check_structure(BadIO(), [CheckpointIO]))

    assert "missing parameter 'storage_options'" in problems["save_checkpoint"]
    assert "'map_location' is required" in problems["load_checkpoint"]
    assert "parameter 1 is named 'target'" in problems["remove_checkpoint"]
    assert "is missing" in problems["teardown"]


def test_async_protocol_adds_wait_and_keeps_the_base_members() -> None:
    members = [m.name for m in protocol_members(AsyncCheckpointIO)]
    problems = _problems(check_structure(BadIO(), [AsyncCheckpointIO]))

    assert members[:4] == ["save_checkpoint", "load_checkpoint", "remove_checkpoint", "teardown"]
    assert "wait" in members
    assert {"save_checkpoint", "teardown", "wait"} <= set(problems)


class BadLauncher:
    is_interactive_compatible = True

    def launch(self, function: object) -> None:
        pass


def test_launcher_must_accept_args_and_kwargs() -> None:
    problems = _problems(check_structure(BadLauncher(), [Launcher]))

    assert set(problems) == {"launch"}
    assert "does not accept *args" in problems["launch"]
    assert "does not accept **kwargs" in problems["launch"]


class LenientIO:
    """Everything here is compatible with CheckpointIO."""

    def save_checkpoint(
        self, checkpoint: object, path: object, storage_options: object = None, *, extra: int = 1
    ) -> None:
        pass

    def load_checkpoint(self, *args: object, **kwargs: object) -> None:
        pass

    @staticmethod
    def remove_checkpoint(path: object) -> None:
        pass

    def teardown(self) -> None:
        pass


def test_compatible_variations_are_accepted() -> None:
    assert check_structure(LenientIO(), [CheckpointIO]) == []


class InstanceAttributeEnvironment:
    def __init__(self) -> None:
        self.creates_processes_externally = False
        self.main_address = "localhost"
        self.main_port = 1234
        self.world_size = 1
        self.global_rank = 0
        self.local_rank = 0
        self.node_rank = 0

    def detect(self) -> bool:
        return False

    def validate(self) -> None:
        pass

    def teardown(self) -> None:
        pass


def test_plain_instance_attributes_satisfy_read_only_properties() -> None:
    assert check_structure(InstanceAttributeEnvironment(), [ClusterEnvironment]) == []


@pytest.mark.parametrize(
    ("expected", "actual", "fragment"),
    [
        ("(a, b=1)", "(a)", "missing parameter 'b'"),
        ("(a, b=1)", "(a, b)", "'b' is required"),
        ("(a, b=1)", "(a, b=2)", "'b' defaults to 2"),
        ("(a, *, t=None)", "(a, t=None)", ""),
        ("(a, *, t=None)", "(a)", "missing keyword parameter 't'"),
        ("(a)", "(a, /)", "'a' is positional-only"),
        ("(a)", "(*, a)", "'a' is keyword-only"),
        ("(a)", "(a, b)", "extra required parameter 'b'"),
        ("(a)", "(a, b=0, *c, d=1, **e)", ""),
        ("(f, *args, **kwargs)", "(f, *args)", "does not accept **kwargs"),
        ("(a, b)", "(b, a)", "'a' is at position 2"),
        ("(a, /)", "(x, /)", ""),
        ("(a, /)", "()", "too few positional arguments"),
        ("(flag=True)", "(flag=1)", "'flag' defaults to 1"),
    ],
)
def test_signature_rules(expected: str, actual: str, fragment: str) -> None:
    def sig(text: str) -> inspect.Signature:
        namespace: dict[str, Any] = {}
        exec(f"def f{text}: pass", namespace)
        return inspect.signature(namespace["f"])

    problems = " | ".join(signature_problems(sig(expected), sig(actual)))
    if fragment:
        assert fragment in problems
    else:
        assert problems == ""


def test_protocols_for_capabilities() -> None:
    assert protocols_for("checkpoint_io", ()) == [CheckpointIO]
    assert protocols_for("checkpoint_io", {"async"}) == [AsyncCheckpointIO]
    assert protocols_for("strategy", {"step_boundary"}) == [Strategy, StepBoundary]
    assert protocols_for("strategy", {"not_structural"}) == [Strategy]


def test_clause_helpers() -> None:
    assert clause_ids("saves (CKPT-1), parents (CKPT-2); again CKPT-1 and ACKPT-3") == (
        "CKPT-1",
        "CKPT-2",
        "ACKPT-3",
    )
    assert clause_ids(None) == ()
    assert protocol_clause_prefix(AsyncCheckpointIO) == "ACKPT"
    assert protocol_clause_prefix(Collective) == "COLL"


def test_every_builtin_protocol_member_names_a_clause() -> None:
    # The structure layer blames a member's first clause; the protocols must name one each.
    for protocol in (CheckpointIO, AsyncCheckpointIO, Collective, ClusterEnvironment, Strategy):
        unnamed = [m.name for m in protocol_members(protocol) if not m.clauses]
        assert unnamed == [], f"{protocol.__name__} members without a clause ID: {unnamed}"
