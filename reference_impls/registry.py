"""Plugin discovery: component names to factories, through entry points.

Installing a plugin distribution that declares, for example::

    [project.entry-points."trainspec.accelerators"]
    hpu = "trainspec_hpu:HPUAccelerator"

makes ``resolve(accelerator="hpu")`` work with no import and no code change. The built-in
reference implementations are registered the same way, in trainspec's own ``pyproject.toml``.
An entry point loads to a class or a factory callable; nothing is imported until a name is
looked up (:meth:`Registry.get`) or listed (:meth:`Registry.list_components`).

Kinds and their entry-point groups (:data:`ENTRY_POINT_GROUPS`)::

    "accelerator"          trainspec.accelerators
    "strategy"             trainspec.strategies
    "precision"            trainspec.precisions
    "checkpoint_io"        trainspec.checkpoint_io
    "cluster_environment"  trainspec.cluster_environments

A group's old name is read too (:data:`LEGACY_ENTRY_POINT_GROUPS`): ``trainspec.environments``
for cluster environments, deprecated, so plugins that declare it keep working; new plugins
declare the canonical group above (the environment concept has one name everywhere: the
protocol ``ClusterEnvironment``, the kind ``cluster_environment``, the reference package
``trainspec.reference.cluster_environments``, the group ``trainspec.cluster_environments``).

Factories are called by :func:`trainspec.reference.connector.resolve` as follows:
accelerators, precisions, checkpoint IO and environments with no arguments; strategies with
the keyword arguments ``accelerator``, ``precision``, ``checkpoint_io``,
``cluster_environment``, ``parallel_devices`` and ``num_nodes``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

from trainspec.accelerator import Accelerator
from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value

__all__ = [
    "ENTRY_POINT_GROUPS",
    "LEGACY_ENTRY_POINT_GROUPS",
    "REGISTRY_KINDS",
    "ComponentInfo",
    "Factory",
    "Registry",
    "RegistryKind",
    "default_registry",
]

RegistryKind: TypeAlias = Literal[
    "accelerator", "strategy", "precision", "checkpoint_io", "cluster_environment"
]
"""A kind of component that can be named by a string (the conformance kit's kind names)."""

REGISTRY_KINDS: Final[tuple[RegistryKind, ...]] = (
    "accelerator",
    "strategy",
    "precision",
    "checkpoint_io",
    "cluster_environment",
)
"""Every :data:`RegistryKind`, in documentation order."""

ENTRY_POINT_GROUPS: Final[Mapping[RegistryKind, str]] = MappingProxyType(
    {
        "accelerator": "trainspec.accelerators",
        "strategy": "trainspec.strategies",
        "precision": "trainspec.precisions",
        "checkpoint_io": "trainspec.checkpoint_io",
        "cluster_environment": "trainspec.cluster_environments",
    }
)
"""The entry-point group searched for each kind (its canonical name)."""

LEGACY_ENTRY_POINT_GROUPS: Final[Mapping[RegistryKind, tuple[str, ...]]] = MappingProxyType(
    {"cluster_environment": ("trainspec.environments",)}
)
"""Deprecated group names still searched, after the canonical one, for the kinds listed."""

Factory: TypeAlias = Callable[..., object]
"""What an entry point loads to: a class or a callable returning a component."""

_PROGRAMMATIC: Final = "registered programmatically"


@dataclass(frozen=True)
class ComponentInfo:
    """One registered component, as :meth:`Registry.list_components` reports it.

    ``object_path`` is ``"module:attribute"``; ``distribution`` and ``version`` name the
    installed distribution that declared the entry point (``None`` for programmatic
    registrations); ``description`` is the first line of the factory's docstring;
    ``available`` is ``accelerator.is_available()`` for accelerators and ``None`` (not
    applicable) for other kinds, or ``False`` when the factory could not be loaded; ``error``
    says why loading or the availability check failed, or names a duplicate.
    """

    name: str
    kind: RegistryKind
    object_path: str
    distribution: str | None
    version: str | None
    description: str
    available: bool | None
    error: str | None = None

    @property
    def source(self) -> str:
        """``"<distribution> <version>"``, or how the component was registered."""
        if self.distribution is None:
            return _PROGRAMMATIC
        return f"{self.distribution} {self.version}" if self.version else self.distribution


@dataclass(frozen=True)
class _Entry:
    name: str
    object_path: str
    distribution: str | None
    version: str | None
    entry_point: importlib.metadata.EntryPoint | None
    factory: Factory | None  # set for programmatic registrations

    @property
    def source(self) -> str:
        if self.distribution is None:
            return _PROGRAMMATIC
        return f"distribution {self.distribution} {self.version or ''}".rstrip()


class Registry:
    """Component names to factories, per kind, from entry points plus programmatic
    registrations.

    Entry points are scanned once per kind and cached; a factory is imported on first use and
    cached. :meth:`clear_cache` forgets both (for example after installing a plugin into the
    running interpreter); programmatic registrations survive it. All methods are thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._scanned: dict[RegistryKind, dict[str, list[_Entry]]] = {}
        self._registered: dict[RegistryKind, dict[str, _Entry]] = {k: {} for k in REGISTRY_KINDS}
        self._loaded: dict[tuple[RegistryKind, str], Factory] = {}

    # -- public API -----------------------------------------------------------------------

    def names(self, kind: RegistryKind) -> list[str]:
        """The registered names of ``kind``, sorted. Imports nothing."""
        return sorted(self._entries(_check_kind(kind)))

    def get(self, kind: RegistryKind, name: str) -> Factory:
        """The factory registered as ``name`` for ``kind``.

        Raises :class:`~trainspec.ConfigurationError` when ``name`` is unknown (listing the
        known names and how to install a plugin), when two sources register it (naming both),
        or when its entry point cannot be imported (naming the object path and the error).
        """
        kind = _check_kind(kind)
        if not isinstance(name, str):
            raise ConfigurationError(
                f"a {kind} name must be a string (a registered name); got {describe_value(name)}."
            )
        with self._lock:
            cached = self._loaded.get((kind, name))
            if cached is not None:
                return cached
            entries = self._entries(kind)
            found = entries.get(name)
            if not found:
                known = ", ".join(map(repr, sorted(entries))) or "none"
                raise ConfigurationError(
                    f"no {kind} named {name!r} is registered; known {kind} names: {known}. "
                    f"A plugin provides new names through the {ENTRY_POINT_GROUPS[kind]!r} "
                    "entry-point group: pip install the package that provides it."
                )
            if len(found) > 1:
                sources = " and ".join(f"{e.object_path} ({e.source})" for e in found)
                raise ConfigurationError(
                    f"the {kind} name {name!r} is registered more than once: by {sources}. "
                    "Uninstall one of the distributions, or pass an instance instead of the "
                    "name."
                )
            factory = _load(kind, found[0])
            self._loaded[(kind, name)] = factory
            return factory

    def register(
        self, kind: RegistryKind, name: str, factory: Factory, *, replace: bool = False
    ) -> None:
        """Register ``factory`` as ``name`` for ``kind`` in this process.

        A name that is already registered (by an entry point or an earlier call) raises
        :class:`~trainspec.ConfigurationError` naming its source, unless ``replace`` is set
        and the earlier registration was programmatic too.
        """
        kind = _check_kind(kind)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a {kind} name must be a non-empty string; got {name!r}.")
        if not callable(factory):
            raise ConfigurationError(
                f"the factory for {kind} {name!r} must be a class or callable; got {factory!r}."
            )
        with self._lock:
            registered = self._registered[kind]
            existing = self._scan(kind).get(name, [])
            if existing:
                raise ConfigurationError(
                    f"cannot register {kind} {name!r}: it is already registered by "
                    f"{existing[0].object_path} ({existing[0].source})."
                )
            if name in registered and not replace:
                raise ConfigurationError(
                    f"cannot register {kind} {name!r}: it is already registered "
                    f"programmatically as {registered[name].object_path}; pass replace=True "
                    "to replace it."
                )
            registered[name] = _Entry(
                name=name,
                object_path=_object_path(factory),
                distribution=None,
                version=None,
                entry_point=None,
                factory=factory,
            )
            self._loaded.pop((kind, name), None)

    def unregister(self, kind: RegistryKind, name: str) -> None:
        """Remove a programmatic registration; a name not registered that way is ignored."""
        kind = _check_kind(kind)
        with self._lock:
            if self._registered[kind].pop(name, None) is not None:
                self._loaded.pop((kind, name), None)

    def list_components(self, kind: RegistryKind) -> list[ComponentInfo]:
        """Every registered component of ``kind``, sorted by name.

        Loads each factory to read its docstring; for accelerators also instantiates it with
        no arguments and calls ``is_available()``. **Never raises** for a broken plugin: a
        failure is reported in :attr:`ComponentInfo.error` (with ``available=False`` when the
        factory could not be loaded). A name registered twice is listed once per source.
        """
        kind = _check_kind(kind)
        with self._lock:
            entries = {name: list(found) for name, found in self._entries(kind).items()}
        infos: list[ComponentInfo] = []
        for name in sorted(entries):
            found = entries[name]
            duplicate = (
                "registered more than once: " + ", ".join(e.source for e in found)
                if len(found) > 1
                else None
            )
            for entry in found:
                infos.append(_describe(kind, entry, duplicate))
        return infos

    def clear_cache(self) -> None:
        """Forget scanned entry points and loaded factories (not programmatic
        registrations), so that the next lookup sees distributions installed since."""
        with self._lock:
            self._scanned.clear()
            self._loaded.clear()
        importlib.invalidate_caches()

    # -- internals ------------------------------------------------------------------------

    def _entries(self, kind: RegistryKind) -> dict[str, list[_Entry]]:
        with self._lock:
            merged = {name: list(found) for name, found in self._scan(kind).items()}
            for name, entry in self._registered[kind].items():
                merged.setdefault(name, []).append(entry)
            return merged

    def _scan(self, kind: RegistryKind) -> dict[str, list[_Entry]]:
        scanned = self._scanned.get(kind)
        if scanned is None:
            scanned = {}
            seen: set[tuple[str, str, str | None]] = set()
            groups = (ENTRY_POINT_GROUPS[kind], *LEGACY_ENTRY_POINT_GROUPS.get(kind, ()))
            found = [ep for group in groups for ep in importlib.metadata.entry_points(group=group)]
            for entry_point in found:
                distribution = getattr(entry_point, "dist", None)
                dist_name = None if distribution is None else distribution.name
                key = (entry_point.name, entry_point.value, dist_name)
                if key in seen:  # the same distribution found twice on sys.path
                    continue
                seen.add(key)
                scanned.setdefault(entry_point.name, []).append(
                    _Entry(
                        name=entry_point.name,
                        object_path=entry_point.value,
                        distribution=dist_name or "an unknown distribution",
                        version=None if distribution is None else distribution.version,
                        entry_point=entry_point,
                        factory=None,
                    )
                )
            self._scanned[kind] = scanned
        return scanned


def _check_kind(kind: object) -> RegistryKind:
    for known in REGISTRY_KINDS:
        if kind == known:
            return known
    raise ConfigurationError(
        f"unknown component kind {kind!r}; the kinds are {', '.join(map(repr, REGISTRY_KINDS))}."
    )


def _load(kind: RegistryKind, entry: _Entry) -> Factory:
    if entry.factory is not None:
        return entry.factory
    assert entry.entry_point is not None
    try:
        loaded: object = entry.entry_point.load()
    except Exception as error:
        raise ConfigurationError(
            f"the {kind} {entry.name!r} ({entry.object_path}, from {entry.source}) could not "
            f"be imported: {type(error).__name__}: {error}"
        ) from error
    if not callable(loaded):
        raise ConfigurationError(
            f"the {kind} {entry.name!r} ({entry.object_path}, from {entry.source}) must load "
            f"to a class or factory callable; got {type(loaded).__name__}."
        )
    factory: Factory = loaded
    return factory


def _describe(kind: RegistryKind, entry: _Entry, duplicate: str | None) -> ComponentInfo:
    def info(description: str, available: bool | None, error: str | None) -> ComponentInfo:
        return ComponentInfo(
            name=entry.name,
            kind=kind,
            object_path=entry.object_path,
            distribution=entry.distribution,
            version=entry.version,
            description=description,
            available=available,
            error=duplicate if duplicate is not None else error,
        )

    try:
        factory = _load(kind, entry)
    except ConfigurationError as error:
        return info("", False, str(error))
    doc = inspect.getdoc(factory) or ""
    description = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    if kind != "accelerator":
        return info(description, None, None)
    try:
        accelerator = factory()
        if not isinstance(accelerator, Accelerator):
            return info(description, None, "does not implement trainspec.Accelerator")
        return info(description, bool(accelerator.is_available()), None)
    except Exception as error:  # availability is reported, never raised
        return info(description, None, f"availability check failed: {error!r}")


def _object_path(factory: Factory) -> str:
    module = getattr(factory, "__module__", None) or "?"
    qualname = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"{module}:{qualname}"


_DEFAULT: Final = Registry()


def default_registry() -> Registry:
    """The process-wide registry that :func:`~trainspec.reference.connector.resolve` uses."""
    return _DEFAULT
