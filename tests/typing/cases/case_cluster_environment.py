"""Typing cases for :class:`trainspec.ClusterEnvironment`.

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from typing_extensions import assert_type

from trainspec import ClusterEnvironment


class _EnvironmentCore:
    """Every ClusterEnvironment member except ``main_port`` and ``validate``."""

    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

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

    def teardown(self) -> None:
        pass


# -- positive -------------------------------------------------------------------------------


class StructuralEnvironment(_EnvironmentCore):
    @property
    def main_port(self) -> int:
        return 29500

    def validate(self) -> None:
        pass


class FrozenEnvironment:
    """Plain attributes satisfy the read-only properties."""

    def __init__(self) -> None:
        self.creates_processes_externally = True
        self.main_address = "10.0.0.1"
        self.main_port = 1234
        self.world_size = 8
        self.global_rank = 3
        self.local_rank = 3
        self.node_rank = 0

    def detect(self) -> bool:
        return True

    def validate(self) -> None:
        pass

    def teardown(self) -> None:
        pass


environment: ClusterEnvironment = StructuralEnvironment()
frozen: ClusterEnvironment = FrozenEnvironment()


def use_environment(environment: ClusterEnvironment) -> None:
    assert_type(environment.detect(), bool)
    assert_type(environment.creates_processes_externally, bool)
    assert_type(environment.main_address, str)
    assert_type(environment.main_port, int)
    assert_type(environment.world_size, int)
    assert_type(environment.global_rank, int)
    assert_type(environment.local_rank, int)
    assert_type(environment.node_rank, int)
    assert_type(environment.validate(), None)


# -- negative -------------------------------------------------------------------------------


class StringPort(_EnvironmentCore):
    @property
    def main_port(self) -> str:
        return "29500"

    def validate(self) -> None:
        pass


class ValidateReturnsBool(_EnvironmentCore):
    @property
    def main_port(self) -> int:
        return 29500

    def validate(self) -> bool:
        return True


class MissingValidate(_EnvironmentCore):
    @property
    def main_port(self) -> int:
        return 29500


class ExplicitMissingPort(ClusterEnvironment):
    def detect(self) -> bool:
        return True

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

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
        pass

    def teardown(self) -> None:
        pass


string_port: ClusterEnvironment = StringPort()  # type: ignore[assignment]
validate_returns_bool: ClusterEnvironment = ValidateReturnsBool()  # type: ignore[assignment]
missing: ClusterEnvironment = MissingValidate()  # type: ignore[assignment]
abstract = ExplicitMissingPort()  # type: ignore[abstract]


def misuse_environment(environment: ClusterEnvironment) -> None:
    environment.world_size = 4  # type: ignore[misc]
    environment.main_port + "0"  # type: ignore[operator]
