"""Static conformance: does a class satisfy its protocols as ``mypy --strict`` sees them?

The structure layer of the kit inspects signatures at run time; this module asks the type
checker, which also compares annotations. For a class and the protocols it claims (those it
subclasses, plus any named), :func:`typecheck` writes a small module into a temporary
directory and runs mypy on it (``mypy.api.run``, strict, with the plugin's own modules
followed silently, so only the conformance question is reported)::

    import trainspec
    import my_plugin.io as _target_module

    def _instance() -> _target_module.BucketIO: ...
    def _check_CheckpointIO() -> None:
        _whole: trainspec.CheckpointIO = _instance()              # assignable as a whole
        _concrete_CheckpointIO(_target_module.BucketIO)           # no abstract member left
        _expect(_protocol_CheckpointIO().save_checkpoint)(        # one line per member, so
            _instance().save_checkpoint)                          # every mismatch is named

Each error mypy reports on those lines becomes a :class:`Mismatch` naming the protocol
member, what the protocol expects, what the class has, and the spec clauses that govern the
member (from :data:`trainspec.conformance.clauses.CLAUSES`, or the IDs in the member's
docstring where that table is unavailable).

mypy is not a runtime dependency of trainspec but its ``typecheck`` extra
(``pip install 'trainspec[typecheck]'``): without it, :func:`typecheck` raises
:class:`~trainspec.ConfigurationError` saying how to install it.
"""

from __future__ import annotations

import inspect
import os
import re
import site
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from typing_extensions import get_protocol_members, is_protocol

import trainspec
from trainspec.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "INSTALL_HINT",
    "Mismatch",
    "TypecheckResult",
    "claimed_protocols",
    "default_cache_dir",
    "protocol_by_name",
    "trainspec_protocols",
    "typecheck",
]

INSTALL_HINT: Final = "pip install 'trainspec[typecheck]' (or: pip install mypy)"
"""How to get the type checker that :func:`typecheck` runs."""

_MODULE_NAME: Final = "_trainspec_typecheck"
_CLAUSE_ID: Final = re.compile(r"\b[A-Z][A-Z0-9]*-\d+\b")
_LINE: Final = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+): (?P<severity>error|note): (?P<message>.*?)"
    r"(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
_INCOMPATIBLE: Final = re.compile(
    r'has incompatible type "(?P<got>.*)"; expected "(?P<expected>.*)"'
)
_NO_ATTRIBUTE: Final = re.compile(r'has no attribute "(?P<member>[^"]+)"')
_DEF: Final = re.compile(r"^def (?:\[[^\]]*\] )?(?P<name>\w+)\(")
_ATTRIBUTE_CONFLICT: Final = re.compile(
    r'^(?P<name>\w+): expected "(?P<expected>.*)", got "(?P<got>.*)"$'
)
_IMPORT_CODES: Final = frozenset({"import-not-found", "import-untyped", "import"})


@dataclass(frozen=True)
class Mismatch:
    """One way the class does not satisfy a protocol, in the kit's terms.

    ``member`` is ``None`` for a problem with the class as a whole (for example mypy's
    verdict on the assignment when no single member explains it). ``expected`` and ``got``
    are types as mypy prints them; ``got`` is ``"missing"`` for an absent member.
    """

    protocol: str
    member: str | None
    clauses: tuple[str, ...]
    expected: str
    got: str
    detail: str = ""

    @property
    def subject(self) -> str:
        """``Protocol.member``, or the protocol alone."""
        return f"{self.protocol}.{self.member}" if self.member else self.protocol


@dataclass(frozen=True)
class TypecheckResult:
    """What :func:`typecheck` found: ``ok`` when there is no mismatch."""

    target: str
    """``module:QualifiedName`` of the class."""
    protocols: tuple[str, ...]
    """The protocols checked, by name."""
    mismatches: tuple[Mismatch, ...]
    mypy_version: str
    source: str
    """The generated module that mypy checked."""
    mypy_output: str
    """mypy's raw report."""

    @property
    def ok(self) -> bool:
        """Whether the class satisfies every protocol checked."""
        return not self.mismatches


def trainspec_protocols() -> dict[str, type]:
    """Every protocol ``trainspec`` exports, by name (``"CheckpointIO"``, ...)."""
    found: dict[str, type] = {}
    for name in trainspec.__all__:
        value = getattr(trainspec, name)
        if isinstance(value, type) and is_protocol(value):
            found[name] = value
    return found


def protocol_by_name(name: str) -> type:
    """The trainspec protocol called ``name``: ``"CheckpointIO"``, ``"trainspec.CheckpointIO"``
    or a kind name (``"checkpoint_io"``). Raises :class:`~trainspec.ConfigurationError`
    naming the valid names."""
    protocols = trainspec_protocols()
    wanted = name.strip().removeprefix("trainspec.")
    if wanted in protocols:
        return protocols[wanted]
    from trainspec.conformance.structure import KIND_PROTOCOLS

    if wanted in KIND_PROTOCOLS:
        return KIND_PROTOCOLS[wanted]
    raise ConfigurationError(
        f"unknown protocol {name!r}; valid: {', '.join(protocols)} (or a kind: "
        f"{', '.join(KIND_PROTOCOLS)})"
    )


def claimed_protocols(cls: type, extra: Iterable[type] = ()) -> list[type]:
    """The trainspec protocols ``cls`` subclasses, plus ``extra``, without those implied by
    another one in the list (``AsyncCheckpointIO`` implies ``CheckpointIO``)."""
    known = set(trainspec_protocols().values())
    chosen: list[type] = [base for base in cls.__mro__[1:] if base in known]
    for protocol in extra:
        if protocol not in chosen:
            chosen.append(protocol)
    return [
        protocol
        for protocol in chosen
        # issubclass() refuses protocols with data members: compare the MROs instead.
        if not any(other is not protocol and protocol in other.__mro__ for other in chosen)
    ]


def default_cache_dir() -> Path:
    """Where mypy's cache lives between runs: ``$XDG_CACHE_HOME/trainspec/mypy`` (or
    ``~/.cache/...``), one per Python version. The first run analyses torch and takes tens of
    seconds; later runs take a few."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(base) / "trainspec" / f"mypy-{version}"


def typecheck(
    cls: type,
    protocols: Sequence[type] = (),
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> TypecheckResult:
    """Check statically that ``cls`` satisfies each of :func:`claimed_protocols`\\
    ``(cls, protocols)``.

    Raises :class:`~trainspec.ConfigurationError` when the check cannot run: mypy is not
    installed (the message says how to install it), ``cls`` is not a class importable by
    name, it claims no protocol, or mypy cannot see the class's module (not found, or
    installed without a ``py.typed`` marker). Mismatches are results, not errors.
    """
    try:
        from mypy import api
        from mypy.version import __version__ as mypy_version
    except ImportError as error:
        raise ConfigurationError(
            f"trainspec typecheck needs mypy, which is not installed: {INSTALL_HINT}"
        ) from error
    if not isinstance(cls, type):
        raise ConfigurationError(
            f"typecheck needs a class; got {type(cls).__name__} {cls!r:.80}. Name the class "
            "that implements the protocol (module:Class)."
        )
    if "<locals>" in cls.__qualname__ or cls.__module__ in ("__main__", "builtins"):
        raise ConfigurationError(
            f"{cls.__qualname__} must be defined at module level in an importable module for "
            f"mypy to see it; it is defined in {cls.__module__!r}."
        )
    chosen = claimed_protocols(cls, protocols)
    if not chosen:
        raise ConfigurationError(
            f"{cls.__module__}:{cls.__qualname__} subclasses no trainspec protocol; name the "
            f"ones it implements with --protocol (one of {', '.join(trainspec_protocols())})."
        )
    source, lines = _generate(cls, chosen)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    with tempfile.TemporaryDirectory(prefix="trainspec-typecheck-") as tmp:
        module_path = Path(tmp, f"{_MODULE_NAME}.py")
        module_path.write_text(source, encoding="utf-8")
        config_path = Path(tmp, "mypy.ini")
        config_path.write_text(_config(_search_roots(cls)), encoding="utf-8")
        stdout, stderr, status = api.run(
            [
                str(module_path),
                "--config-file",
                str(config_path),
                "--cache-dir",
                str(cache),
                "--show-error-codes",
                "--no-error-summary",
                "--no-pretty",
                "--no-color-output",
                "--hide-error-context",
            ]
        )
    if status not in (0, 1):
        raise ConfigurationError(
            f"mypy could not run (exit status {status}): "
            f"{' '.join((stderr or stdout).split())[:500]}"
        )
    mismatches = _interpret(stdout, lines, cls)
    return TypecheckResult(
        target=f"{cls.__module__}:{cls.__qualname__}",
        protocols=tuple(p.__name__ for p in chosen),
        mismatches=tuple(mismatches),
        mypy_version=mypy_version,
        source=source,
        mypy_output=stdout,
    )


# -- the generated module -----------------------------------------------------------------


@dataclass(frozen=True)
class _LineRole:
    """What one line of the generated module checks."""

    role: str  # "import", "instance", "whole", "concrete", "member"
    protocol: type | None = None
    member: str | None = None


def _generate(cls: type, protocols: Sequence[type]) -> tuple[str, dict[int, _LineRole]]:
    target = f"_target_module.{cls.__qualname__}"
    out: list[str] = []
    roles: dict[int, _LineRole] = {}

    def emit(text: str, role: _LineRole | None = None) -> None:
        out.append(text)
        if role is not None:
            roles[len(out)] = role

    emit(f"# Generated by `trainspec typecheck` for {cls.__module__}:{cls.__qualname__}.")
    emit('# mypy: disable-error-code="type-arg"')  # a generic class is checked as Class[Any]
    emit("from __future__ import annotations")
    emit("")
    emit("from collections.abc import Callable")
    emit("from typing import TypeVar")
    emit("")
    aliases: dict[str, str] = {}
    for index, module in enumerate(sorted({p.__module__ for p in protocols})):
        aliases[module] = f"_protocols_{index}"
        emit(f"import {module} as {aliases[module]}")
    emit(f"import {cls.__module__} as _target_module", _LineRole("import"))
    emit("")
    emit('_T = TypeVar("_T")')
    emit("")
    emit("")
    emit(f"def _instance() -> {target}:", _LineRole("instance"))
    emit("    raise NotImplementedError")
    emit("")
    emit("")
    emit("def _expect(expected: _T) -> Callable[[_T], None]:")
    emit("    raise NotImplementedError")
    for protocol in protocols:
        name = protocol.__name__
        spelled = f"{aliases[protocol.__module__]}.{name}"
        emit("")
        emit("")
        emit(f"def _protocol_{name}() -> {spelled}:")
        emit("    raise NotImplementedError")
        emit("")
        emit("")
        emit(f"def _concrete_{name}(cls: type[{spelled}]) -> None:")
        emit("    pass")
        emit("")
        emit("")
        emit(f"def _check_{name}() -> None:")
        emit(f"    _whole: {spelled} = _instance()", _LineRole("whole", protocol))
        emit(f"    _concrete_{name}({target})", _LineRole("concrete", protocol))
        for member in sorted(get_protocol_members(protocol)):
            emit(
                f"    _expect(_protocol_{name}().{member})(_instance().{member})",
                _LineRole("member", protocol, member),
            )
    emit("")
    return "\n".join(out), roles


def _config(roots: Sequence[str]) -> str:
    lines = ["[mypy]", "strict = True", "follow_imports = silent", "warn_unused_configs = False"]
    if roots:
        lines.append("mypy_path = " + ",".join(roots))
    return "\n".join(lines) + "\n"


def _search_roots(cls: type) -> list[str]:
    """The ``sys.path`` entry holding ``cls``'s top-level package, unless it is an installed
    site-packages directory (mypy finds those itself, and refuses them in ``mypy_path``)."""
    top = sys.modules.get(cls.__module__.split(".")[0])
    if top is None:
        return []
    paths = list(getattr(top, "__path__", []))
    file = getattr(top, "__file__", None)
    if paths:
        root = Path(paths[0]).resolve().parent
    elif file:
        root = Path(file).resolve().parent
    else:
        return []
    installed = {
        Path(p).resolve()
        for p in [
            *site.getsitepackages(),
            site.getusersitepackages(),
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
        ]
    }
    return [] if root in installed else [str(root)]


# -- reading mypy's report ----------------------------------------------------------------


@dataclass
class _Message:
    line: int
    severity: str
    message: str
    code: str | None
    notes: list[str]


def _parse(output: str) -> list[_Message]:
    messages: list[_Message] = []
    for raw in output.splitlines():
        match = _LINE.match(raw)
        if match is None or not match["path"].endswith(f"{_MODULE_NAME}.py"):
            continue
        line, severity, text = int(match["line"]), match["severity"], match["message"]
        if severity == "note" and messages and messages[-1].line == line:
            messages[-1].notes.append(text)
        else:
            messages.append(_Message(line, severity, text, match["code"], []))
    return messages


def _interpret(output: str, roles: dict[int, _LineRole], cls: type) -> list[Mismatch]:
    member_findings: list[Mismatch] = []
    whole_errors: dict[type, _Message] = {}
    abstract: list[type] = []
    other: list[Mismatch] = []
    for message in _parse(output):
        if message.severity != "error":
            continue
        role = roles.get(message.line)
        if role is None:
            other.append(Mismatch("", None, (), "", message.message))
            continue
        if role.role in ("import", "instance"):
            raise _unseen_module(cls, message)
        assert role.protocol is not None
        if role.role == "whole":
            whole_errors[role.protocol] = message
        elif role.role == "concrete":
            if message.code == "type-abstract":
                abstract.append(role.protocol)
        else:
            member_findings.append(_member_mismatch(role.protocol, role.member, message))
    # mypy's note on the whole assignment prints methods as `def name(...)`: nicer than the
    # Callable[...] of the per-member lines, where it has them.
    nicer: dict[tuple[str, str], tuple[str, str]] = {}
    for protocol, message in whole_errors.items():
        for name, conflict in _conflicts_in_notes(message.notes).items():
            nicer[(protocol.__name__, name)] = conflict
    findings: list[Mismatch] = []
    for finding in member_findings:
        better = nicer.get((finding.protocol, finding.member or ""))
        if better is not None and finding.got != "missing":
            expected, got = better
            finding = Mismatch(
                finding.protocol, finding.member, finding.clauses, expected, got, finding.detail
            )
        findings.append(finding)
    explained = {finding.protocol for finding in findings}
    for protocol in abstract:
        names = sorted(
            set(getattr(cls, "__abstractmethods__", ())) & set(get_protocol_members(protocol))
        )
        for name in names or [None]:
            findings.append(
                Mismatch(
                    protocol.__name__,
                    name,
                    _clauses(protocol, name) if name else (),
                    "an implementation",
                    "abstract: not implemented, so the class cannot be instantiated",
                )
            )
        explained.add(protocol.__name__)
    for protocol, message in whole_errors.items():
        if protocol.__name__ not in explained:
            findings.append(
                Mismatch(
                    protocol.__name__,
                    None,
                    (),
                    f"assignable to trainspec.{protocol.__name__}",
                    message.message,
                    "; ".join(note.strip() for note in message.notes),
                )
            )
    return findings + other


def _member_mismatch(protocol: type, member: str | None, message: _Message) -> Mismatch:
    clauses = _clauses(protocol, member) if member else ()
    name = protocol.__name__
    if message.code == "attr-defined" and _NO_ATTRIBUTE.search(message.message):
        return Mismatch(name, member, clauses, "present", "missing")
    incompatible = _INCOMPATIBLE.search(message.message)
    if incompatible is not None:
        return Mismatch(name, member, clauses, incompatible["expected"], incompatible["got"])
    detail = "; ".join(note.strip() for note in message.notes)
    return Mismatch(name, member, clauses, "compatible with the protocol", message.message, detail)


def _conflicts_in_notes(notes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{member: (expected, got)}`` from the notes mypy attaches to a protocol mismatch."""
    found: dict[str, tuple[str, str]] = {}
    pending: dict[str, str] = {}
    mode = ""
    for note in notes:
        text = note.strip()
        if text in ("Expected:", "Got:"):
            mode = text
            continue
        definition = _DEF.match(text)
        if definition is not None and mode:
            if mode == "Expected:":
                pending[definition["name"]] = text
            elif definition["name"] in pending:
                found[definition["name"]] = (pending.pop(definition["name"]), text)
            mode = ""
            continue
        attribute = _ATTRIBUTE_CONFLICT.match(text)
        if attribute is not None:
            found[attribute["name"]] = (attribute["expected"], attribute["got"])
    return found


def _clauses(protocol: type, member: str) -> tuple[str, ...]:
    """The spec clauses that govern ``protocol.member``: from the clause table when it is
    available, else the clause IDs in the member's docstring."""
    owner = next((base for base in protocol.__mro__ if member in vars(base)), protocol)
    key = f"{owner.__name__}.{member}"
    try:
        from trainspec.conformance.clauses import CLAUSES as table
    except ImportError:  # degrade to the docstring's IDs
        pass
    else:
        ids = tuple(clause.id for clause in table.values() if key in clause.members)
        if ids:
            return ids
    doc = inspect.getdoc(getattr(owner, member, None)) or ""
    return tuple(dict.fromkeys(_CLAUSE_ID.findall(doc)))


def _unseen_module(cls: type, message: _Message) -> ConfigurationError:
    module = cls.__module__
    if message.code == "import-untyped":
        return ConfigurationError(
            f"mypy sees {module!r} as installed without type information: add an empty "
            f"'py.typed' file to the package (PEP 561) and include it in the distribution, "
            f"or install it in editable mode. mypy: {message.message}"
        )
    if message.code in _IMPORT_CODES:
        return ConfigurationError(
            f"mypy cannot find module {module!r} ({message.message}); run from the directory "
            "that contains it, or install the package."
        )
    return ConfigurationError(
        f"mypy cannot see class {cls.__qualname__} in module {module!r}: {message.message}"
    )
