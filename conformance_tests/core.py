"""The kit's core: targets, checks, outcomes. No pytest needed.

A *target* is what is being verified: a factory that makes a fresh implementation for every
check, the capabilities the implementation declares, the checks it is expected to fail (with
a reason), and options (for example the device to run on). A *check* is a function registered
under a spec clause ID; it takes the target and returns normally (pass), raises
:class:`CheckFailure` (fail) or :class:`CheckSkipped` (not applicable, with a reason).

Checks register themselves with :func:`check` when their module is imported; :func:`checks_for`
imports the modules the table of kinds lists for a kind (``trainspec.conformance.checks.<kind>``
and its submodules) and returns the checks those modules define.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

__all__ = [
    "KINDS",
    "LAYERS",
    "Check",
    "CheckFailure",
    "CheckFn",
    "CheckSkipped",
    "Kind",
    "Layer",
    "Target",
    "check",
    "checks_for",
]

Kind = Literal[
    "accelerator",
    "precision",
    "checkpoint_io",
    "collective",
    "cluster_environment",
    "launcher",
    "strategy",
]
KINDS: Final[tuple[Kind, ...]] = (
    "accelerator",
    "precision",
    "checkpoint_io",
    "collective",
    "cluster_environment",
    "launcher",
    "strategy",
)

Layer = Literal["structure", "behaviour", "distributed", "end_to_end"]
"""Layers run in this order; a failure in an earlier layer is the root cause of later ones."""
LAYERS: Final[tuple[Layer, ...]] = ("structure", "behaviour", "distributed", "end_to_end")

_T_co = TypeVar("_T_co", covariant=True)


class CheckFailure(AssertionError):
    """A check found a violation of its clause.

    The message reads ``<target> must <expected> (<clause>); got <actual>. <hint>``, followed by
    a snippet that reproduces the failure.
    """

    def __init__(
        self,
        clause: str,
        *,
        expected: str,
        actual: str,
        hint: str = "",
        snippet: str = "",
        subject: str = "the implementation",
    ) -> None:
        self.clause = clause
        self.expected = expected
        self.actual = actual
        self.hint = hint
        self.snippet = snippet
        self.subject = subject
        message = f"{subject} must {expected} ({clause}); got {actual}."
        if hint:
            message += f" {hint}"
        if snippet:
            message += "\n\nTo reproduce:\n" + snippet
        super().__init__(message)


class CheckSkipped(Exception):
    """The check does not apply to this target; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Target(Generic[_T_co]):
    """An implementation to verify.

    ``factory`` is called once per check and must return a fresh, un-set-up instance.
    ``capabilities`` names optional behaviour the implementation declares (each kind's
    vocabulary is in ``trainspec.conformance.capabilities``). ``expected_failures`` maps a
    clause ID to the reason it is known to fail; an unknown ID is an error. ``options`` carries
    kind-specific settings such as ``{"device": "cuda"}``.
    """

    kind: Kind
    factory: Callable[[], _T_co]
    name: str = ""
    capabilities: frozenset[str] = frozenset()
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, object] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        """``name`` if given, else the factory's qualified name."""
        if self.name:
            return self.name
        module = getattr(self.factory, "__module__", "?")
        qualname = getattr(self.factory, "__qualname__", repr(self.factory))
        return f"{module}:{qualname}"

    def make(self) -> _T_co:
        """A fresh instance from the factory."""
        return self.factory()


# Checks receive a Target of their kind's protocol; the registry holds them uniformly.
CheckFn = Callable[[Target[Any]], None]


@dataclass(frozen=True)
class Check:
    """One registered check: the rule ``name`` enforcing clause ``clause``."""

    clause: str
    name: str
    kind: Kind
    layer: Layer
    requires: frozenset[str]
    func: CheckFn
    doc: str

    def run(self, target: Target[Any]) -> None:
        """Run against ``target``; raises CheckFailure / CheckSkipped as the check decides.

        A required structural capability (``async``, ``backward_sync``, ...) the target does
        not list is inferred from an instance (``isinstance`` with its protocol)."""
        missing = self.requires - target.capabilities
        if missing:
            from trainspec.conformance.kinds import KIND_TABLE, infer_structural

            if missing <= KIND_TABLE[self.kind].structural.keys():
                missing -= infer_structural(self.kind, target.make())
        if missing:
            raise CheckSkipped(f"capability not declared: {', '.join(sorted(missing))}")
        self.func(target)


_REGISTRY: dict[str, Check] = {}


def check(
    clause: str,
    kind: Kind,
    *,
    layer: Layer = "behaviour",
    requires: Iterable[str] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Register the decorated function as a check of ``clause`` for ``kind``.

    The function's name (``check_<subject>_<property>``) is the check's name and must be
    unique; its docstring's first line says the rule.
    """

    def register(func: CheckFn) -> CheckFn:
        name = func.__name__
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise ValueError(f"duplicate conformance check name {name!r}")
        doc = (func.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = Check(
            clause=clause,
            name=name,
            kind=kind,
            layer=layer,
            requires=frozenset(requires),
            func=func,
            doc=doc[0] if doc else "",
        )
        return func

    return register


def checks_for(kind: Kind, *, distributed: bool = False) -> list[Check]:
    """Every check of ``kind`` in the modules :data:`trainspec.conformance.kinds.KIND_TABLE`
    lists for it, in layer order, then the table's module order, then definition order.

    Imports those modules explicitly and returns only the checks they define, whatever else was
    imported before (the result never depends on import history). With ``distributed``, the
    modules of the checks that run only on a world's ranks
    (``KindSpec.distributed_check_modules``) are included too."""
    from trainspec.conformance.kinds import KIND_TABLE

    spec = KIND_TABLE[kind]
    modules = (*spec.check_modules, *(spec.distributed_check_modules if distributed else ()))
    for module in modules:
        importlib.import_module(module)
    position = {module: index for index, module in enumerate(modules)}
    found = [c for c in _REGISTRY.values() if c.kind == kind and c.func.__module__ in position]
    return sorted(found, key=lambda c: (LAYERS.index(c.layer), position[c.func.__module__]))


def all_checks(*, distributed: bool = False) -> list[Check]:
    """Every check of every kind (with ``distributed``, those that run only on a world's ranks
    too), each kind as :func:`checks_for` orders it."""
    result: list[Check] = []
    for kind in KINDS:
        result.extend(checks_for(kind, distributed=distributed))
    return result
