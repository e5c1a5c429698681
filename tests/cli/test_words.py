"""How the command line says a count."""

from __future__ import annotations

import pytest

from plait.cli._words import count


@pytest.mark.parametrize(
    ("number", "said"), [(0, "0 tools"), (1, "1 tool"), (2, "2 tools"), (11, "11 tools")]
)
def test_a_count_agrees_with_its_noun(number: int, said: str) -> None:
    assert count(number, "tool") == said


def test_a_plural_that_is_not_an_s_is_given() -> None:
    assert [count(n, "match", "matches") for n in (1, 3)] == ["1 match", "3 matches"]
