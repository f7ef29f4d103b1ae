"""``trainspec.reference._messages``: quoting user values and parsing digits never raise.

Regression tests for the fuzzing finding ``huge-int`` (``repr`` of an int of more than 4300
digits raises ``ValueError``) and ``slurm-job-id-digits`` (``'²'.isdigit()`` is true).
"""

from __future__ import annotations

import sys

import pytest

from trainspec.reference._messages import describe_value, is_ascii_digits, parse_ascii_int

HUGE = 10 ** (sys.get_int_max_str_digits() + 100)


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_huge_int_is_described_by_its_digit_count_without_raising() -> None:
    with pytest.raises(ValueError):
        repr(HUGE)  # the premise: this is what used to crash the messages

    text = describe_value(HUGE)
    negative = describe_value(-HUGE)

    assert "int of about" in text and "digits" in text
    assert negative.startswith("<-int")
    assert len(text) < 80


def test_a_long_repr_is_cut_and_says_how_long_it_was() -> None:
    text = describe_value("9" * 5000, limit=20)

    assert text.startswith("'9999")
    assert "(5002 characters)" in text
    assert len(text) < 60


def test_a_short_value_is_its_repr() -> None:
    assert describe_value("cpu ") == "'cpu '"
    assert describe_value(10**70) == repr(10**70)
    assert describe_value(True) == "True"


def test_a_value_whose_repr_raises_is_described_by_its_type() -> None:
    assert describe_value(_ReprRaises()) == "<_ReprRaises whose repr raises RuntimeError>"
    assert "list" in describe_value([HUGE])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", 12),
        (" +7 ", 7),
        ("-3", -3),
        ("007", 7),
        ("0" * 5000 + "1", 1),
        ("9" * 18, 10**18 - 1),
    ],
)
def test_ascii_integers_parse(text: str, expected: int) -> None:
    assert parse_ascii_int(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "-", "+", "1_0", "0x10", "1e3", "1.0", "\u00b2", "\u0661", "\uff11", "9" * 19,
     "9" * 5000, "1 2"],
)  # fmt: skip
def test_anything_else_is_refused_without_raising(text: str) -> None:
    assert parse_ascii_int(text) is None


def test_ascii_digits_excludes_superscripts_and_other_scripts() -> None:
    assert "\u00b2".isdigit()  # the premise: str.isdigit is not enough
    assert is_ascii_digits("123456")
    assert not is_ascii_digits("\u00b2")
    assert not is_ascii_digits("\u0661")
    assert not is_ascii_digits("")
    assert not is_ascii_digits("-1")
