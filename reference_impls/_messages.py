"""Safe pieces of error messages and safe parsing of user-given integers.

Error messages quote what the user gave, and that value may be hostile: an int of more digits
than ``sys.get_int_max_str_digits()`` (``repr`` raises ``ValueError``), a string of megabytes,
an object whose ``repr`` raises. :func:`describe_value` quotes any value without raising and
within a length limit; every reference module formats user input with it, never with ``!r``.

:func:`parse_ascii_int` is the one way the reference code turns text (an environment variable,
a device request) into an int: ASCII digits only (``str.isdigit`` is true for ``'²'``, which
``int()`` refuses, and ``int()`` takes ``'\u0661'`` and ``'1_0'``), and a bounded number of digits
(``int()`` of more than 4300 digits raises ``ValueError``).
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_DIGITS",
    "describe_value",
    "is_ascii_digits",
    "parse_ascii_int",
]

DEFAULT_LIMIT: Final = 80
"""Characters of a value's ``repr`` that :func:`describe_value` keeps by default."""

MAX_DIGITS: Final = 18
"""Significant digits :func:`parse_ascii_int` accepts by default: every int below ``10**18``
(ranks, ports, device counts and job ids are far smaller)."""

_LOG10_2: Final = math.log10(2)


def describe_value(value: object, limit: int = DEFAULT_LIMIT) -> str:
    """``repr(value)`` for an error message: **never** raises, at most about ``limit``
    characters.

    A longer ``repr`` is cut after ``limit`` characters and marked with its full length
    (``'9999...'... (5002 characters)``); an int too large to print is described by its
    number of digits; a value whose ``repr`` raises is described by its type.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        digits = math.floor(value.bit_length() * _LOG10_2) + 1  # within one of the true count
        if digits > limit:
            sign = "-" if value < 0 else ""
            return f"<{sign}int of about {digits} digits>"
    try:
        text = repr(value)
    except Exception as error:  # any repr failure: describe the type instead
        return f"<{_type_name(value)} whose repr raises {type(error).__name__}>"
    if not isinstance(text, str):  # a broken __repr__ that returns a non-str
        return f"<{_type_name(value)}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def parse_ascii_int(text: str, *, max_digits: int = MAX_DIGITS) -> int | None:
    """The int that ``text`` spells, or ``None`` if it spells none.

    Accepted: optional surrounding whitespace, an optional ``+`` or ``-``, then ASCII digits
    ``0-9`` only, at most ``max_digits`` of them after leading zeros. Underscores, other
    bases, unicode digits and anything longer are refused (``None``); **never** raises.
    """
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    sign = 1
    if stripped[:1] in ("+", "-"):
        sign = -1 if stripped[0] == "-" else 1
        stripped = stripped[1:]
    if not stripped or not stripped.isascii() or not stripped.isdigit():
        return None
    significant = stripped.lstrip("0") or "0"
    if len(significant) > max_digits:
        return None
    return sign * int(significant)


def is_ascii_digits(text: str) -> bool:
    """Whether ``text`` is non-empty and only ASCII digits ``0-9`` (no sign, no spaces)."""
    return bool(text) and text.isascii() and text.isdigit()


def _type_name(value: object) -> str:
    try:
        return type(value).__qualname__
    except Exception:  # a metaclass could break even this
        return "object"
