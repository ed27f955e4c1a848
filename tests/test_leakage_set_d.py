"""Leakage set D (tests/data/leakage_lessons_d.md) is what its builder writes, and its rows keep set A's schema."""

import json

from tests.data import leakage_lessons_d, leakage_templated_d_build

KEYS = ["id", "text", "label", "kind", "problem", "coincides_with", "source"]


def test_committed_set_d_is_what_the_builder_writes() -> None:
    rows = leakage_lessons_d.build()
    committed = [json.loads(line) for line in leakage_lessons_d.OUT.read_text(encoding="utf-8").splitlines()]
    assert committed == rows


def test_committed_templated_problems_are_what_the_template_writes() -> None:
    expected = leakage_templated_d_build.seat_rows() + leakage_templated_d_build.vault_rows()
    lines = leakage_templated_d_build.OUT.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == expected


def test_set_d_rows_have_set_a_fields_and_labels() -> None:
    rows = [json.loads(line) for line in leakage_lessons_d.OUT.read_text(encoding="utf-8").splitlines()]
    assert all(list(row) == KEYS for row in rows)
    assert {row["label"] for row in rows} == {"leak", "general"}
    assert all((row["problem"] is None) == (row["label"] == "general") for row in rows)
    assert sum(row["label"] == "leak" for row in rows) == 100
    assert sum(row["label"] == "general" for row in rows) == 64


def test_numbers_follow_set_a_literal_rules() -> None:
    found = leakage_lessons_d.numbers("F_10 and 7-24-25, x = -2272, 40,320, \\frac{290}{2}, 31/32 and 14.7")
    assert found == {
        7,
        24,
        25,
        -2272,
        40320,
        145,
        leakage_lessons_d.Fraction(31, 32),
        leakage_lessons_d.Fraction(147, 10),
    }
