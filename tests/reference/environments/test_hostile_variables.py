"""Hostile environment variables and addresses raise ConfigurationError naming what is valid.

Regression tests for the fuzzing findings ``huge-int`` (``SLURM_NODELIST`` with a range end of
5000 digits crashed ``int()``), ``free-port-host`` (picking a port on an address that does
not resolve, or is not local, raised ``socket.gaierror`` / ``OSError``) and
``slurm-job-id-digits`` (``'²'.isdigit()`` is true, ``int('²')`` raises).
"""

from __future__ import annotations

import socket

import pytest

from trainspec import ConfigurationError
from trainspec.reference.cluster_environments import (
    LocalEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
    first_host,
)
from trainspec.reference.cluster_environments._variables import find_free_port

_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_JOB_NAME",
)  # fmt: skip

_SLURM = {
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NODELIST": "node[001-002]",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NAME": "train",
}
UNICODE_DIGITS = ("\u00b2", "\u00b9", "\u2460", "\u0661", "\u0967", "\uff19", "7\u00b2", "12\u00b2")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _slurm(monkeypatch: pytest.MonkeyPatch, **changes: str) -> SLURMEnvironment:
    for name, value in {**_SLURM, **changes}.items():
        monkeypatch.setenv(name, value)
    return SLURMEnvironment()


# -- SLURM_JOB_ID and the other integers: ASCII digits only -------------------------------------


@pytest.mark.parametrize("job_id", UNICODE_DIGITS)
def test_a_job_id_of_non_ascii_digits_is_refused_naming_the_job_id(
    monkeypatch: pytest.MonkeyPatch, job_id: str
) -> None:
    environment = _slurm(monkeypatch, SLURM_JOB_ID=job_id)

    with pytest.raises(ConfigurationError, match="SLURM_JOB_ID must be a decimal job id"):
        _ = environment.main_port


def test_a_long_job_id_still_gives_a_port_from_its_last_four_digits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _slurm(monkeypatch, SLURM_JOB_ID="9" * 5000).main_port == 15000 + 9999


@pytest.mark.parametrize("value", [*UNICODE_DIGITS, "1_0", "9" * 5000, "0x10", "+"])
@pytest.mark.parametrize("name", ["SLURM_NTASKS", "SLURM_NODEID", "MASTER_PORT"])
def test_a_slurm_integer_that_is_not_ascii_digits_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    environment = _slurm(monkeypatch, **{name: value})

    with pytest.raises(ConfigurationError, match=name) as caught:
        environment.validate()
    assert "integer" in str(caught.value)
    assert len(str(caught.value)) < 500  # a 5000-digit value is quoted, not printed in full


@pytest.mark.parametrize("value", ["\u0661", "1_0", "9" * 5000])
def test_torchelastic_ranks_are_ascii_integers(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    for name, given in {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": value}.items():
        monkeypatch.setenv(name, given)

    with pytest.raises(ConfigurationError, match=r"WORLD_SIZE must be an integer >= 1"):
        _ = TorchElasticEnvironment().world_size


def test_signs_and_padding_keep_working(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", " +4 ")
    monkeypatch.setenv("RANK", "002")
    environment = LocalEnvironment(main_port=29500)
    assert (environment.world_size, environment.global_rank) == (4, 2)


# -- SLURM host lists ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("n[1-" + "9" * 5000 + "]", "n1"), ("n[" + "9" * 50 + "]", "n" + "9" * 50)],
    ids=["range-end-of-5000-digits", "long-number"],
)
def test_long_ranges_are_compared_without_int(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize(
    "nodelist",
    ["n[" + "9" * 5000 + "-1]", "n[\u0661-\u0662]", "n[\u00b2]", "n[1-\u00b2]"],
    ids=["range-ends-before-start", "arabic-indic", "superscript", "superscript-end"],
)
def test_malformed_ranges_are_refused_naming_the_host_list_form(nodelist: str) -> None:
    with pytest.raises(ConfigurationError, match="host list") as caught:
        first_host(nodelist, source="environment variable SLURM_NODELIST")
    assert len(str(caught.value)) < 500


def test_slurm_main_address_with_a_huge_range_is_the_first_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environment = _slurm(monkeypatch, SLURM_NODELIST="n[1-" + "9" * 5000 + "]")
    assert environment.main_address == "n1"


# -- LocalEnvironment: the address a port is picked on ------------------------------------------


def test_an_address_that_does_not_resolve_is_a_configuration_error_naming_what_is_allowed() -> None:
    environment = LocalEnvironment(main_address="no-such-host.invalid")

    with pytest.raises(ConfigurationError) as caught:
        _ = environment.main_port

    message = str(caught.value)
    assert "'no-such-host.invalid'" in message
    assert "MASTER_PORT" in message and "'127.0.0.1'" in message
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.parametrize(
    "error",
    [
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        OSError(99, "Cannot assign requested address"),
        ValueError("embedded null character"),
    ],
    ids=["does-not-resolve", "not-local", "malformed"],
)
def test_every_bind_failure_is_translated(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def refuse(self: socket.socket, address: object) -> None:
        raise error

    monkeypatch.setattr(socket.socket, "bind", refuse)

    with pytest.raises(ConfigurationError, match="LocalEnvironment: cannot pick a free port"):
        _ = LocalEnvironment(main_address="10.255.255.1").main_port
    with pytest.raises(ConfigurationError, match="find_free_port"):
        find_free_port("10.255.255.1")


def test_master_port_avoids_picking_a_port_on_a_remote_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MASTER_PORT", "29501")
    assert LocalEnvironment(main_address="no-such-host.invalid").main_port == 29501
