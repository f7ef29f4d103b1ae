"""Every member of every protocol is governed by a clause, and every clause governs real members.

The members of a protocol are its abstract members (all of them: the protocols are purely
abstract); a clause names them as ``Protocol.member`` (``CheckpointIO.save_checkpoint``), or
names a whole ``Protocol`` for a rule about all its operations (``COLL-1``).
"""

from __future__ import annotations

import pytest
from typing_extensions import get_protocol_members, is_protocol

import trainspec
from trainspec.conformance.clauses import CLAUSES

PROTOCOLS: dict[str, type] = {
    name: getattr(trainspec, name)
    for name in trainspec.__all__
    if isinstance(getattr(trainspec, name), type) and is_protocol(getattr(trainspec, name))
}

# Which protocol each clause prefix governs; E2E and ERR govern whole runs and every protocol.
PREFIX_PROTOCOL = {
    "ACC": "Accelerator",
    "PREC": "Precision",
    "CKPT": "CheckpointIO",
    "ACKPT": "AsyncCheckpointIO",
    "COLL": "Collective",
    "ENV": "ClusterEnvironment",
    "LAUNCH": "Launcher",
    "STRAT": "Strategy",
    "SYNC": "BackwardSyncControl",
    "SHARD": "ShardedModuleContext",
    "STEP": "StepBoundary",
    "LAYOUT": "CheckpointLayoutControl",
    "DCKPT": "DistributedCheckpointIO",
}
WHOLE_RUN_PREFIXES = ("E2E", "ERR")


def _owner(protocol: type, member: str) -> type:
    """The class in ``protocol``'s MRO that defines ``member``."""
    return next(cls for cls in protocol.__mro__ if member in vars(cls))


def test_the_protocols_are_the_agreed_ones() -> None:
    assert set(PROTOCOLS) == set(PREFIX_PROTOCOL.values())


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_protocol_member_is_abstract(name: str) -> None:
    protocol = PROTOCOLS[name]
    assert set(get_protocol_members(protocol)) == set(protocol.__abstractmethods__)


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_protocol_member_is_named_by_a_clause(name: str) -> None:
    protocol = PROTOCOLS[name]
    named = {member for record in CLAUSES.values() for member in record.members}
    unnamed = [
        member
        for member in sorted(protocol.__abstractmethods__)
        if f"{name}.{member}" not in named
        and f"{_owner(protocol, member).__name__}.{member}" not in named
    ]
    assert not unnamed, f"{name} members no clause in docs/spec.md names: {unnamed}"


@pytest.mark.parametrize("clause_id", list(CLAUSES))
def test_every_clause_names_existing_members_of_its_protocol(clause_id: str) -> None:
    record = CLAUSES[clause_id]
    if record.prefix in WHOLE_RUN_PREFIXES:
        assert record.members in ((), ("Strategy",)), record.members
        return
    assert record.members, f"{clause_id} must name the members it governs"
    expected = PREFIX_PROTOCOL[record.prefix]
    for member in record.members:
        protocol_name, _, attribute = member.partition(".")
        assert protocol_name == expected, f"{clause_id} names {member}; expected {expected}.*"
        if attribute:
            assert attribute in PROTOCOLS[protocol_name].__abstractmethods__, (
                f"{clause_id} names {member}, which is not a member of {protocol_name}"
            )
