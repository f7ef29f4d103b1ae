"""Fixtures for the kit's framework tests: a private check registry with fake checks modules,
and tiny implementations that need no torch."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance import core
from trainspec.conformance.capabilities import checks_module_name
from trainspec.conformance.kinds import kind_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from trainspec.conformance.core import Kind


class GoodEnvironment:
    """A structurally conforming ClusterEnvironment (structural typing, no subclassing)."""

    made = 0
    torn_down = 0

    def __init__(self) -> None:
        type(self).made += 1

    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

    @property
    def main_port(self) -> int:
        return 29500

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    def validate(self) -> None:
        return None

    def teardown(self) -> None:
        type(self).torn_down += 1


class FakeChecks:
    """Registers throwaway checks into a private registry, under a fake checks module."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.registry: dict[str, core.Check] = {}
        monkeypatch.setattr(core, "_REGISTRY", self.registry)

    def module(self, kind: Kind, capabilities: Mapping[str, str] | None = None) -> None:
        """Install (empty) check modules for ``kind``, the first declaring ``capabilities``."""
        name = checks_module_name(kind)
        for listed in kind_spec(kind).check_modules:  # a check package and its modules
            module = types.ModuleType(listed)
            module.__path__ = []
            self._monkeypatch.setitem(sys.modules, listed, module)
        sys.modules[name].CAPABILITIES = dict(capabilities or {})  # type: ignore[attr-defined]

    def missing_module(self, kind: Kind) -> None:
        """Make ``kind``'s checks module unimportable (as if not installed)."""
        self._monkeypatch.setitem(sys.modules, checks_module_name(kind), None)

    def add(
        self,
        clause: str,
        kind: Kind = "cluster_environment",
        *,
        name: str,
        layer: core.Layer = "behaviour",
        requires: tuple[str, ...] = (),
        body: Callable[[core.Target[object]], None] | None = None,
    ) -> core.Check:
        """Register check ``name`` enforcing ``clause``; ``body`` defaults to passing."""

        def func(target: core.Target[object]) -> None:
            if body is not None:
                body(target)

        func.__name__ = name
        func.__doc__ = f"fake check {name}"
        func.__module__ = checks_module_name(kind)  # checks_for finds a kind's listed modules'
        core.check(clause, kind, layer=layer, requires=requires)(func)
        return self.registry[name]


@pytest.fixture
def fake_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChecks]:
    """A private registry with a checks module for cluster_environment declaring 'extra'."""
    fakes = FakeChecks(monkeypatch)
    fakes.module("cluster_environment", {"extra": "an optional behaviour"})
    GoodEnvironment.made = 0
    GoodEnvironment.torn_down = 0
    yield fakes


def _fail(clause: str) -> Callable[[core.Target[object]], None]:
    def body(target: core.Target[object]) -> None:
        target.make()
        raise core.CheckFailure(
            clause, expected="do the thing", actual="it did not", subject=target.display_name
        )

    return body


@pytest.fixture
def failing() -> Callable[[str], Callable[[core.Target[object]], None]]:
    """``failing(clause)``: a check body that makes an instance and fails for ``clause``."""
    return _fail


@pytest.fixture
def good_env() -> type[GoodEnvironment]:
    """A conforming ClusterEnvironment class counting instances made and torn down."""
    return GoodEnvironment
