"""Typing cases for :class:`trainspec.Launcher` (a ParamSpec-typed ``launch``).

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from typing_extensions import ParamSpec, assert_type

from trainspec import Launcher

_P = ParamSpec("_P")
_R = TypeVar("_R")


def train(steps: int, *, name: str = "run") -> float:
    return float(steps)


# -- positive -------------------------------------------------------------------------------


class InlineLauncher:
    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return function(*args, **kwargs)


class ExplicitLauncher(Launcher):
    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return function(*args, **kwargs)


launcher: Launcher = InlineLauncher()
explicit: Launcher = ExplicitLauncher()


def use_launcher(launcher: Launcher) -> None:
    assert_type(launcher.is_interactive_compatible, bool)
    assert_type(launcher.launch(train, 3), float)
    assert_type(launcher.launch(train, 3, name="x"), float)
    assert_type(launcher.launch(lambda: "done"), str)


# -- negative -------------------------------------------------------------------------------


class UntypedLauncher:
    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[..., object]) -> object:
        return function()


class NoResultLauncher:
    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> None:
        function(*args, **kwargs)


class ExplicitMissingLaunch(Launcher):
    @property
    def is_interactive_compatible(self) -> bool:
        return True


untyped: Launcher = UntypedLauncher()  # type: ignore[assignment]
no_result: Launcher = NoResultLauncher()  # type: ignore[assignment]
abstract = ExplicitMissingLaunch()  # type: ignore[abstract]


def misuse_launcher(launcher: Launcher) -> None:
    launcher.launch(train, "three")  # type: ignore[arg-type]
    launcher.launch(train, 3, label="x")  # type: ignore[call-arg]
    result: str = launcher.launch(train, 3)  # type: ignore[assignment]
