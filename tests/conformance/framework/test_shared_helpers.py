"""Shared helpers live once: value description, a factory's import path, a free port."""

from __future__ import annotations

import functools

import pytest

from trainspec import ConfigurationError
from trainspec.conformance import _checkpoint_kill, _cli_common, _helpers, fakes, kinds, runner
from trainspec.conformance.checks import checkpoint_io as checkpoint_io_checks
from trainspec.conformance.distributed import factory_path
from trainspec.reference import _messages
from trainspec.reference.cluster_environments import _variables


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class _ClassWithWrapped:
    """A class whose ``__wrapped__`` attribute is not a wrapper's target."""

    __wrapped__ = staticmethod(len)


def module_level_factory() -> object:
    return object()


# -- value description ---------------------------------------------------------------------


def test_the_kit_describes_values_with_the_one_reference_describer() -> None:
    assert runner._describe is _messages.describe_value
    assert kinds._shown is _messages.describe_value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (_BrokenRepr(), "<_BrokenRepr whose repr raises RuntimeError>"),
        (10**5000, "<int of about 5001 digits>"),
        ("x" * 300, f"{'x' * 119!r}"[:120] + "... (302 characters)"),
        ([1, 2], "[1, 2]"),
    ],
    ids=["broken-repr", "huge-int", "long-string", "short-list"],
)
def test_describe_value_in_failure_messages_never_raises_and_stays_short(
    value: object, expected: str
) -> None:
    assert _helpers.describe_value(value) == expected


def test_the_cli_quotes_arguments_with_the_one_describer(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "a" * 500
    assert _cli_common.quote_argument(text, 40) == f"{text!r}"[:40] + "... (502 characters)"
    monkeypatch.setattr(_messages, "describe_value", lambda value, limit: f"<{limit}>")
    assert _cli_common.quote_argument(text, 40) == "<40>"


def test_describe_value_describes_tensors_by_their_metadata() -> None:
    import torch

    text = _helpers.describe_value(torch.ones(2, 3).t())
    assert text == "tensor(dtype=torch.float32, shape=(3, 2), stride=(1, 3), device=cpu)"


# -- a factory's import path ---------------------------------------------------------------


def test_every_import_path_of_the_kit_is_the_one_in_helpers() -> None:
    assert not hasattr(_checkpoint_kill, "importable_path")
    assert checkpoint_io_checks.importable_path is _helpers.importable_path


def test_importable_path_names_a_module_level_factory_and_follows_wrappers() -> None:
    expected = (__name__, "module_level_factory")
    assert _helpers.importable_path(module_level_factory) == expected

    @functools.wraps(module_level_factory)
    def wrapper() -> object:
        return module_level_factory()

    assert _helpers.importable_path(wrapper) == expected


def test_importable_path_never_unwraps_a_class() -> None:
    assert _helpers.importable_path(_ClassWithWrapped) == (__name__, "_ClassWithWrapped")


@pytest.mark.parametrize(
    "factory", [lambda: None, functools.partial(module_level_factory), object()]
)
def test_a_factory_without_an_import_path_has_none(factory: object) -> None:
    assert _helpers.importable_path(factory) is None
    assert _helpers.qualified_name(factory) is None
    with pytest.raises(ConfigurationError, match="module-level class or function"):
        factory_path(factory)


def test_factory_path_is_module_colon_qualname() -> None:
    assert factory_path(module_level_factory) == f"{__name__}:module_level_factory"
    assert factory_path(_ClassWithWrapped) == f"{__name__}:_ClassWithWrapped"


# -- a free port ---------------------------------------------------------------------------


def test_the_kits_free_port_is_the_reference_one(monkeypatch: pytest.MonkeyPatch) -> None:
    port = fakes.free_port()
    assert isinstance(port, int) and 0 < port < 65536
    calls: list[tuple[str, str]] = []

    def find_free_port(address: str = "127.0.0.1", *, owner: str = "") -> int:
        calls.append((address, owner))
        return 4242

    monkeypatch.setattr(_variables, "find_free_port", find_free_port)
    assert fakes.free_port("localhost") == 4242
    assert calls == [("localhost", "free_port")]


def test_free_port_on_an_address_that_is_not_local_names_itself() -> None:
    with pytest.raises(ConfigurationError, match="free_port"):
        fakes.free_port("10.255.255.1")
