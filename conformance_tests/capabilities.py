"""Per-kind capability vocabularies: the optional behaviour a target may declare.

A capability is a name an implementation declares on its :class:`~trainspec.conformance.Target`
(``capabilities={"async"}``). The kit checks that what is declared works and skips what is
not declared; a name outside the kind's vocabulary is a
:class:`~trainspec.ConfigurationError` naming the valid ones, so a typo never silently skips
checks.

Two sources make up a kind's vocabulary:

- *structural* capabilities, defined here: declaring one makes the structure layer check an
  extra protocol (``checkpoint_io`` + ``"async"`` is checked against
  :class:`~trainspec.AsyncCheckpointIO`; a strategy's optional protocols from
  :mod:`trainspec.capabilities`);
- *behavioural* capabilities, defined by each checks module as ``CAPABILITIES: dict[str, str]``
  (name -> description) in ``trainspec.conformance.checks.<kind>``; checks name them in
  ``@check(..., requires=...)``.

Reading a behavioural vocabulary imports that kind's checks module (and so torch); the
structural part imports nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from trainspec import (
    AsyncCheckpointIO,
    BackwardSyncControl,
    ConfigurationError,
    ShardedModuleContext,
    StepBoundary,
)

if TYPE_CHECKING:
    from trainspec.conformance.core import Kind

__all__ = [
    "STRUCTURAL_CAPABILITIES",
    "StructuralCapability",
    "checks_module_name",
    "structural_protocols",
    "validate_capabilities",
    "vocabulary",
]


@dataclass(frozen=True)
class StructuralCapability:
    """A capability that adds a protocol to the structure layer.

    ``replaces_base`` is true when ``protocol`` extends the kind's protocol (it is then checked
    instead of it, so a violation is reported once).
    """

    protocol: type
    description: str
    replaces_base: bool = False


STRUCTURAL_CAPABILITIES: Final[Mapping[str, Mapping[str, StructuralCapability]]] = {
    "checkpoint_io": {
        "async": StructuralCapability(
            AsyncCheckpointIO,
            "saves complete in the background (trainspec.AsyncCheckpointIO: ACKPT-1 ... ACKPT-5)",
            replaces_base=True,
        ),
    },
    "strategy": {
        "backward_sync": StructuralCapability(
            BackwardSyncControl,
            "gradient synchronisation can be skipped for accumulation "
            "(trainspec.BackwardSyncControl: SYNC-1)",
        ),
        "sharded_module": StructuralCapability(
            ShardedModuleContext,
            "modules can be built directly in sharded form "
            "(trainspec.ShardedModuleContext: SHARD-1)",
        ),
        "step_boundary": StructuralCapability(
            StepBoundary,
            "lazy execution with an explicit step boundary (trainspec.StepBoundary: STEP-1)",
        ),
    },
}
"""Kind -> capability name -> the protocol it adds to the structure layer."""


def checks_module_name(kind: Kind) -> str:
    """The module that holds ``kind``'s behaviour checks."""
    return f"trainspec.conformance.checks.{kind}"


def structural_protocols(kind: Kind, capabilities: Iterable[str]) -> list[type]:
    """The optional protocols the structure layer checks for the declared ``capabilities``."""
    table = STRUCTURAL_CAPABILITIES.get(kind, {})
    return [table[name].protocol for name in sorted(set(capabilities)) if name in table]


def vocabulary(kind: Kind) -> dict[str, str]:
    """Every capability ``kind`` knows, name -> description, sorted by name.

    Imports ``kind``'s checks module for its ``CAPABILITIES``; a missing checks module
    contributes nothing (the structural capabilities remain). Any other import error
    propagates: a broken checks module is a bug in the kit, not in the target.
    """
    merged = {name: cap.description for name, cap in STRUCTURAL_CAPABILITIES.get(kind, {}).items()}
    module_name = checks_module_name(kind)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
    else:
        declared: object = getattr(module, "CAPABILITIES", {})
        if not isinstance(declared, Mapping):
            raise TypeError(
                f"{module_name}.CAPABILITIES must be a dict of capability name -> "
                f"description; got {type(declared).__name__}"
            )
        for name, description in declared.items():
            merged.setdefault(str(name), str(description))
    return dict(sorted(merged.items()))


def validate_capabilities(
    kind: Kind, capabilities: Iterable[str], known: Mapping[str, str] | None = None
) -> frozenset[str]:
    """``capabilities`` as a frozenset, after checking each is in ``kind``'s vocabulary.

    ``known`` is the vocabulary to check against (default: :func:`vocabulary`). Raises
    :class:`~trainspec.ConfigurationError` naming the unknown and the valid names.
    """
    if isinstance(capabilities, str):
        raise ConfigurationError(
            f"capabilities must be a collection of names, not the string {capabilities!r}; "
            f"write {{{capabilities!r}}}"
        )
    declared = frozenset(capabilities)
    valid = vocabulary(kind) if known is None else known
    unknown = sorted(declared - set(valid))
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        allowed = ", ".join(valid) if valid else "none (this kind has no optional capabilities)"
        raise ConfigurationError(
            f"unknown capabilit{'y' if len(unknown) == 1 else 'ies'} {names} for kind "
            f"{kind!r}; valid capabilities: {allowed}"
        )
    return declared
