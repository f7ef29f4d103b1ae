"""The structure layer: does an object have the shape of its protocol?

Run first for every target. For the kind's protocol (and each optional protocol a declared
capability adds) it checks, on one instance from the factory:

1. every protocol member exists;
2. a member the protocol declares as a property is not a method, and a method is not a
   property or a non-callable value;
3. every method's signature accepts every call the protocol allows: the same parameter names,
   kinds (positional / keyword) and positions, optional where the protocol's is optional with
   the same default, ``*args`` / ``**kwargs`` where the protocol takes them, and no extra
   required parameter;
4. ``isinstance(instance, protocol)`` holds (``runtime_checkable``, members only).

Every violation is collected before anything is reported (the spirit of
``zope.interface.verify.verifyObject``), one :class:`Violation` per member, carrying the clause
IDs found in that member's docstring. Behaviour is not this layer's job; annotations are left
to static type checkers.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from typing_extensions import get_protocol_members

from trainspec.conformance.capabilities import STRUCTURAL_CAPABILITIES
from trainspec.conformance.kinds import KIND_TABLE

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "KIND_PROTOCOLS",
    "MemberSpec",
    "Violation",
    "check_structure",
    "clause_ids",
    "protocol_clause_prefix",
    "protocol_members",
    "protocols_for",
    "signature_problems",
]

KIND_PROTOCOLS: Final[dict[str, type]] = {kind: spec.protocol for kind, spec in KIND_TABLE.items()}
"""The protocol every target of a kind must satisfy (from the kinds table)."""

_PREFIXES: Final[dict[str, str]] = {
    **{spec.protocol.__name__: spec.clause_prefixes[0] for spec in KIND_TABLE.values()},
    **{
        cap.protocol.__name__: cap.clause_prefix
        for spec in KIND_TABLE.values()
        for cap in spec.structural.values()
        if cap.clause_prefix
    },
}
"""Protocol name -> the prefix of its clauses (from the kinds table)."""

_CLAUSE_RE: Final = re.compile(r"\b[A-Z][A-Z0-9]*-\d+\b")
_MISSING: Final = object()
_P = inspect.Parameter
_POSITIONAL: Final = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_NAMED: Final = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)


def clause_ids(text: str | None) -> tuple[str, ...]:
    """The clause IDs (``CKPT-3``) in ``text``, in order of first appearance."""
    found: dict[str, None] = {}
    for match in _CLAUSE_RE.findall(text or ""):
        found.setdefault(match, None)
    return tuple(found)


def protocol_clause_prefix(protocol: type) -> str:
    """The clause prefix of ``protocol`` (``"CKPT"`` for CheckpointIO).

    Built-in protocols use the spec's prefixes; for another protocol the prefix of the first
    clause ID in its docstrings, else the protocol's name.
    """
    prefix = _PREFIXES.get(protocol.__name__)
    if prefix is not None and protocol.__module__.startswith("trainspec."):
        return prefix
    for member in protocol_members(protocol):
        if member.clauses:
            return member.clauses[0].rsplit("-", 1)[0]
    return protocol.__name__


def protocols_for(kind: str, capabilities: Iterable[str]) -> list[type]:
    """The protocols a ``kind`` target with ``capabilities`` is checked against, base first.

    A capability protocol that extends the base protocol (AsyncCheckpointIO) replaces it.
    """
    base = KIND_PROTOCOLS[kind]
    table = STRUCTURAL_CAPABILITIES.get(kind, {})
    extra = [table[name] for name in sorted(set(capabilities)) if name in table]
    if any(cap.replaces_base for cap in extra):
        return [cap.protocol for cap in extra]
    return [base, *(cap.protocol for cap in extra)]


@dataclass(frozen=True)
class MemberSpec:
    """One member of a protocol as the structure layer sees it."""

    protocol: type
    name: str
    kind: Literal["property", "method"]
    signature: inspect.Signature | None
    """For methods, the signature without ``self`` and without annotations."""
    clauses: tuple[str, ...]

    @property
    def display(self) -> str:
        """``Protocol.member(params)`` or ``Protocol.member`` for a property."""
        text = f"{self.protocol.__name__}.{self.name}"
        return text + str(self.signature) if self.signature is not None else text


@dataclass(frozen=True)
class Violation:
    """Everything wrong with one member of one protocol on one implementation."""

    protocol: type
    member: str
    subject: str
    """``ImplementationClass.member``."""
    expected: str
    actual: str
    problems: tuple[str, ...]
    clauses: tuple[str, ...]
    hint: str = ""
    """How to fix it, fitted to the violation ("Add the method ...", fix the signature)."""

    @property
    def clause(self) -> str:
        """The member's first clause ID, or the protocol's clause prefix if it names none."""
        return self.clauses[0] if self.clauses else protocol_clause_prefix(self.protocol)

    @property
    def message(self) -> str:
        """``<subject> must <expected> (<clauses>); got <actual>: <problems>. <hint>``."""
        clauses = ", ".join(self.clauses) or protocol_clause_prefix(self.protocol)
        problems = "; ".join(self.problems)
        message = f"{self.subject} must {self.expected} ({clauses}); got {self.actual}: {problems}."
        return f"{message} {self.hint}" if self.hint else message


_SIGNATURE_HINT: Final = (
    "Make the implementation accept every call the protocol allows: extra parameters need "
    "defaults, and optional protocol parameters keep the protocol's default."
)


def _strip(signature: inspect.Signature) -> inspect.Signature:
    params = [p.replace(annotation=_P.empty) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=inspect.Signature.empty)


def _declared(protocol: type, name: str) -> object:
    for klass in protocol.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def protocol_members(protocol: type) -> list[MemberSpec]:
    """The members of ``protocol`` (inherited ones too), in definition order."""
    names = get_protocol_members(protocol)
    ordered: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        for name in vars(klass):
            if name in names:
                ordered.setdefault(name, None)
    members: list[MemberSpec] = []
    for name in ordered:
        raw = _declared(protocol, name)
        if isinstance(raw, property):
            doc = raw.fget.__doc__ if raw.fget is not None else raw.__doc__
            members.append(MemberSpec(protocol, name, "property", None, clause_ids(doc)))
        elif callable(raw):
            signature = inspect.signature(raw)
            params = list(signature.parameters.values())[1:]  # drop self
            bound = _strip(signature.replace(parameters=params))
            doc = getattr(raw, "__doc__", None)
            members.append(MemberSpec(protocol, name, "method", bound, clause_ids(doc)))
        else:  # a plain annotated attribute: treat like a read-only property
            members.append(MemberSpec(protocol, name, "property", None, ()))
    return members


def _is_method_like(raw: object) -> bool:
    return inspect.isfunction(raw) or isinstance(raw, (staticmethod, classmethod))


def _same_default(expected: object, actual: object) -> bool:
    if expected is actual:
        return True
    if type(expected) is not type(actual):
        return False
    try:
        return bool(expected == actual)
    except Exception:  # a default whose __eq__ raises is not the protocol's default
        return False


def signature_problems(expected: inspect.Signature, actual: inspect.Signature) -> list[str]:
    """Why a callable with signature ``actual`` cannot take every call ``expected`` allows.

    Both signatures are without ``self``. An empty list means compatible.
    """
    problems: list[str] = []
    want = list(expected.parameters.values())
    have = list(actual.parameters.values())
    by_name = {p.name: p for p in have if p.kind in _NAMED}
    positional = [p for p in have if p.kind in _POSITIONAL]
    var_positional = any(p.kind is _P.VAR_POSITIONAL for p in have)
    var_keyword = any(p.kind is _P.VAR_KEYWORD for p in have)
    protocol_names = {p.name for p in want}
    matched: set[str] = set()

    def check_default(spec: inspect.Parameter, impl: inspect.Parameter) -> None:
        if spec.default is _P.empty:
            return
        if impl.default is _P.empty:
            problems.append(
                f"parameter '{spec.name}' is required; the protocol makes it optional "
                f"(default {spec.default!r})"
            )
        elif not _same_default(spec.default, impl.default):
            problems.append(
                f"parameter '{spec.name}' defaults to {impl.default!r}; the protocol's default "
                f"is {spec.default!r}"
            )

    for index, spec in enumerate(want):
        if spec.kind is _P.VAR_POSITIONAL:
            if not var_positional:
                problems.append(f"does not accept *{spec.name} (extra positional arguments)")
            continue
        if spec.kind is _P.VAR_KEYWORD:
            if not var_keyword:
                problems.append(f"does not accept **{spec.name} (extra keyword arguments)")
            continue
        if spec.kind is _P.POSITIONAL_ONLY:
            if index < len(positional):
                impl = positional[index]
                matched.add(impl.name)
                check_default(spec, impl)
            elif not var_positional:
                problems.append(
                    f"takes too few positional arguments: nothing at position {index + 1} "
                    f"('{spec.name}')"
                )
            continue
        impl_or_none = by_name.get(spec.name)
        if spec.kind is _P.KEYWORD_ONLY:
            if impl_or_none is None:
                if not var_keyword:
                    problems.append(f"missing keyword parameter '{spec.name}'")
            elif impl_or_none.kind is _P.POSITIONAL_ONLY:
                problems.append(
                    f"parameter '{spec.name}' is positional-only; the protocol passes it by keyword"
                )
            else:
                matched.add(impl_or_none.name)
                check_default(spec, impl_or_none)
            continue
        # POSITIONAL_OR_KEYWORD: callers may pass it at this position or by name.
        if impl_or_none is None:
            if index < len(positional) and positional[index].name not in protocol_names:
                other = positional[index]
                matched.add(other.name)
                problems.append(
                    f"parameter {index + 1} is named '{other.name}'; the protocol names it "
                    f"'{spec.name}' and callers may pass it by keyword"
                )
                check_default(spec, other)
            elif not (var_positional and var_keyword):
                problems.append(f"missing parameter '{spec.name}'")
            continue
        matched.add(impl_or_none.name)
        if impl_or_none.kind is _P.KEYWORD_ONLY:
            problems.append(
                f"parameter '{spec.name}' is keyword-only; the protocol lets callers pass it "
                f"positionally (position {index + 1})"
            )
        elif impl_or_none.kind is _P.POSITIONAL_ONLY:
            problems.append(
                f"parameter '{spec.name}' is positional-only; the protocol lets callers pass "
                "it by keyword"
            )
        else:
            position = positional.index(impl_or_none)
            if position != index:
                problems.append(
                    f"parameter '{spec.name}' is at position {position + 1}; the protocol has "
                    f"it at position {index + 1}"
                )
        check_default(spec, impl_or_none)

    for param in have:
        if param.kind in _NAMED and param.name not in matched and param.default is _P.empty:
            problems.append(
                f"extra required parameter '{param.name}' that the protocol never passes "
                "(give it a default or remove it)"
            )
    return problems


def _implementation_signature(member: object) -> inspect.Signature | None:
    try:
        return _strip(inspect.signature(member))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # builtins without a signature cannot be checked
        return None


def _check_member(obj: object, spec: MemberSpec) -> Violation | None:
    owner = type(obj).__qualname__
    subject = f"{owner}.{spec.name}"
    raw = inspect.getattr_static(obj, spec.name, _MISSING)
    if raw is _MISSING:
        try:  # a dynamic attribute (__getattr__) still counts as present
            raw = getattr(obj, spec.name)
        except Exception:
            raw = _MISSING
    is_descriptor_property = isinstance(raw, property) or (
        hasattr(type(raw), "__get__")
        and not _is_method_like(raw)
        and not callable(raw)
        and raw is not _MISSING
    )

    def violation(actual: str, *problems: str, hint: str = "") -> Violation:
        expected = (
            f"have the property {spec.protocol.__name__}.{spec.name}"
            if spec.kind == "property"
            else f"accept every call to {spec.display}"
        )
        return Violation(
            spec.protocol, spec.name, subject, expected, actual, problems, spec.clauses, hint
        )

    if raw is _MISSING:
        if spec.kind == "property":
            add = (
                f"Add the read-only property '{spec.name}' to {owner} (a @property or a plain "
                "attribute)."
            )
            return violation("nothing", f"the property '{spec.name}' is missing", hint=add)
        add = f"Add the method {spec.name}{spec.signature or '(...)'} to {owner}."
        return violation("nothing", f"the method '{spec.name}' is missing", hint=add)
    if spec.kind == "property":
        if _is_method_like(raw):
            return violation(
                f"a method {spec.name}()",
                "the protocol declares a read-only property: decorate it with @property "
                "(a plain attribute also works)",
            )
        return None
    # A method.
    if is_descriptor_property:
        return violation(
            "a property",
            f"the protocol declares a method called as obj.{spec.name}(...); remove @property",
        )
    bound = getattr(obj, spec.name)
    if not callable(bound):
        return violation(f"a {type(bound).__name__} value", "it is not callable")
    actual = _implementation_signature(bound)
    if actual is None or spec.signature is None:
        return None
    problems = signature_problems(spec.signature, actual)
    if problems:
        return violation(f"{spec.name}{actual}", *problems, hint=_SIGNATURE_HINT)
    return None


def check_structure(obj: object, protocols: Iterable[type]) -> list[Violation]:
    """Every structural violation of ``obj`` against each of ``protocols``.

    Returns an empty list when ``obj`` matches. Never raises for a bad ``obj``: evaluating a
    property is avoided (``inspect.getattr_static``), so a property that raises before setup
    is not a violation.
    """
    violations: list[Violation] = []
    for protocol in protocols:
        found = [v for spec in protocol_members(protocol) if (v := _check_member(obj, spec))]
        violations.extend(found)
        if not found and not _isinstance(obj, protocol):
            violations.append(
                Violation(
                    protocol,
                    "isinstance",
                    type(obj).__qualname__,
                    f"be an instance of {protocol.__name__}",
                    "isinstance(obj, protocol) is False",
                    ("runtime_checkable isinstance failed although every member is present",),
                    (),
                )
            )
    return violations


def _isinstance(obj: object, protocol: type) -> bool:
    try:
        return isinstance(obj, protocol)
    except Exception:  # a property raising inside an old-style runtime check
        return True
