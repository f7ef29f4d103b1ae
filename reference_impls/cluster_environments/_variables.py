"""Reading and checking environment variables for the reference cluster environments.

Every reader raises :class:`~trainspec.ConfigurationError` naming the variable, the value
found and the values allowed (ENV-5). Values are read from :data:`os.environ` at call time,
never cached, so an environment object describes the process it is asked in (a launcher may
set the variables after the object was built).

Integers are ASCII digits with an optional sign and at most 18 significant digits
(:func:`~trainspec.reference._messages.parse_ascii_int`): ``'1_0'``, ``'\u0661'`` and
``'\u00b2'`` are refused, not read as 10, as 1, or raised from ``int()``.
"""

from __future__ import annotations

import os
import socket
from typing import Final

from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value, parse_ascii_int

__all__ = [
    "MAX_PORT",
    "check_address",
    "check_index",
    "check_port",
    "find_free_port",
    "read_address",
    "read_int",
    "read_port",
]

MAX_PORT: Final = 65535


def read_int(
    name: str,
    default: int | None = None,
    *,
    minimum: int = 0,
    owner: str,
) -> int:
    """The integer value of variable ``name`` (``default`` when unset), ``>= minimum``.

    An unset variable without a default, a non-integer value or a value below ``minimum``
    raises :class:`~trainspec.ConfigurationError`.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise ConfigurationError(
                f"{owner}: environment variable {name} must be set to an integer >= {minimum}; "
                "it is not set."
            )
        return default
    value = parse_ascii_int(raw)
    if value is None:
        raise ConfigurationError(
            f"{owner}: environment variable {name} must be an integer >= {minimum} (ASCII "
            f"digits); got {describe_value(raw)}."
        )
    if value < minimum:
        raise ConfigurationError(
            f"{owner}: environment variable {name} must be an integer >= {minimum}; got {value}."
        )
    return value


def check_index(
    value: int, name: str, bound: int, bound_name: str, *, owner: str, inclusive: bool = False
) -> int:
    """``value`` (of variable ``name``) if it is in ``[0, bound)``, or ``[0, bound]`` when
    ``inclusive``; otherwise :class:`~trainspec.ConfigurationError` naming both variables
    (a rank beyond the world size, a local rank beyond the rank)."""
    if value > bound if inclusive else value >= bound:
        closing = "]" if inclusive else ")"
        raise ConfigurationError(
            f"{owner}: environment variable {name} must be in [0, {bound_name}={bound}"
            f"{closing}; got {value}."
        )
    return value


def check_port(value: object, source: str, owner: str) -> int:
    """``value`` if it is an int in ``[1, 65535]``; otherwise
    :class:`~trainspec.ConfigurationError` naming ``source``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PORT:
        raise ConfigurationError(
            f"{owner}: {source} must be a TCP port, an integer in [1, {MAX_PORT}]; got "
            f"{describe_value(value)}."
        )
    return value


def read_port(name: str, owner: str) -> int | None:
    """The port in variable ``name``, or ``None`` when it is unset; a value that is not an
    integer in ``[1, 65535]`` raises :class:`~trainspec.ConfigurationError`."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    value = parse_ascii_int(raw)
    if value is None:
        raise ConfigurationError(
            f"{owner}: environment variable {name} must be a TCP port, an integer in "
            f"[1, {MAX_PORT}]; got {describe_value(raw)}."
        )
    return check_port(value, f"environment variable {name}", owner)


def read_address(name: str, owner: str) -> str | None:
    """The host in variable ``name``, or ``None`` when it is unset; an empty value or one
    with whitespace raises :class:`~trainspec.ConfigurationError`."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    return check_address(raw, f"environment variable {name}", owner)


def check_address(value: object, source: str, owner: str) -> str:
    """``value`` if it is a non-empty host name or IP address without whitespace."""
    if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
        raise ConfigurationError(
            f"{owner}: {source} must be a non-empty host name or IP address without "
            f"whitespace; got {describe_value(value)}."
        )
    return value


def find_free_port(address: str = "127.0.0.1", *, owner: str = "find_free_port") -> int:
    """A TCP port that was free on ``address`` a moment ago (the OS picks it).

    ``address`` **must** be an address of this machine: one that does not resolve, or is
    not local, raises :class:`~trainspec.ConfigurationError` naming it and what is allowed
    (the socket errors are not passed on). Not guaranteed: another process may take the port
    before it is used.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
            port: int = sock.getsockname()[1]
            return port
    except (OSError, ValueError) as error:  # gaierror, EADDRNOTAVAIL; IDNA and NUL errors
        raise ConfigurationError(
            f"{owner}: cannot pick a free port on main address {describe_value(address)} "
            f"({type(error).__name__}: {describe_value(str(error))}); without MASTER_PORT the "
            "port is picked on this machine, so the address must be a local host name or IP "
            "address such as '127.0.0.1' or 'localhost'; or set MASTER_PORT to an integer in "
            f"[1, {MAX_PORT}]."
        ) from error
