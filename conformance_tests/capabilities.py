"""Per-kind capability vocabularies: the optional behaviour a target may declare.

A capability is a name an implementation declares on its :class:`~trainspec.conformance.Target`
(``capabilities={"async"}``). The kit checks that what is declared works and skips what is
not declared; a name outside the kind's vocabulary is a
:class:`~trainspec.ConfigurationError` naming the valid ones, so a typo never silently skips
checks.

Both parts of a kind's vocabulary live in :data:`trainspec.conformance.kinds.KIND_TABLE`:

- *structural* capabilities add a protocol to the structure layer (``checkpoint_io`` +
  ``"async"`` is checked against :class:`~trainspec.AsyncCheckpointIO`; a strategy's optional
  protocols from :mod:`trainspec.capabilities`). They are inferred: an instance that
  implements the protocol has the capability; declaring one it does not implement fails the
  structure layer;
- *behavioural* capabilities are declared by the implementation; checks name them in
  ``@check(..., requires=...)``.

:func:`vocabulary` also imports the kind's checks module, which may add names of its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from trainspec import ConfigurationError
from trainspec.conformance.kinds import KIND_TABLE, StructuralCapability

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


STRUCTURAL_CAPABILITIES: Final[Mapping[str, Mapping[str, StructuralCapability]]] = {
    kind: spec.structural for kind, spec in KIND_TABLE.items() if spec.structural
}
"""Kind -> capability name -> the protocol it adds to the structure layer (from
:data:`~trainspec.conformance.kinds.KIND_TABLE`)."""


def checks_module_name(kind: Kind) -> str:
    """The module that holds ``kind``'s behaviour checks (the first of the table's)."""
    return KIND_TABLE[kind].check_modules[0]


def structural_protocols(kind: Kind, capabilities: Iterable[str]) -> list[type]:
    """The optional protocols the structure layer checks for the declared ``capabilities``."""
    table = STRUCTURAL_CAPABILITIES.get(kind, {})
    return [table[name].protocol for name in sorted(set(capabilities)) if name in table]


def vocabulary(kind: Kind) -> dict[str, str]:
    """Every capability ``kind`` knows, name -> description, sorted by name.

    The kind's vocabulary in :data:`~trainspec.conformance.kinds.KIND_TABLE`, plus any
    ``CAPABILITIES`` its checks module adds (a checks module may extend it, never shrink it).
    A missing checks module contributes nothing. Any other import error propagates: a broken
    checks module is a bug in the kit, not in the target.
    """
    merged = KIND_TABLE[kind].vocabulary
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
