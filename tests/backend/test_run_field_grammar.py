"""The runs list's documented patterns and the service agree: what a pattern takes is listed,
what it refuses is refused with 422 (hypothesis draws values from the patterns themselves)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlguard_backend.api.runs import _check_grammar, _parse_list_params
from rlguard_backend.core.errors import InvalidField
from rlguard_backend.store import run_field_grammar, run_fields

DRAWS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _refusal(sort: str | None, filters: list[str], fields: str | None) -> str | None:
    """None when the service lists runs with these parameters, else its 422 message (the
    checks ``list_runs`` makes, in its order, without a database)."""
    try:
        _, rules, _ = _parse_list_params(sort, filters, fields)
        for rule in rules:
            run_fields.where(run_fields.field_expr(rule.field, "sqlite"), rule)
        _check_grammar(sort, filters, fields)
    except InvalidField as exc:
        return str(exc.detail)
    except ValueError as exc:
        return str(exc)
    return None


@DRAWS
@given(st.from_regex(run_field_grammar.FILTER))
def test_grammar_every_filter_the_pattern_takes_is_taken(rule: str) -> None:
    assert _refusal(None, [rule], None) is None


@DRAWS
@given(st.from_regex(run_field_grammar.SORT).filter(lambda s: len(s) <= 2000))
def test_grammar_every_sort_the_pattern_takes_is_taken(sort: str) -> None:
    assert _refusal(sort, [], None) is None


@DRAWS
@given(st.from_regex(run_field_grammar.FIELDS).filter(lambda s: len(s) <= 4000))
def test_grammar_every_fields_list_the_pattern_takes_is_taken(fields: str) -> None:
    assert _refusal(None, [], fields) is None


@pytest.mark.parametrize(
    ("sort", "rule", "fields"),
    [
        ("-lr", None, None),  # no such field
        ("- name", None, None),  # a space after the minus
        (",".join(["name"] * 5), None, None),  # five sort fields
        (None, "name:gt:1", None),  # text compared as a number
        (None, "last_step:gt:1e999", None),  # not finite
        (None, "last_step:gt:1_000", None),  # Python's underscores: not in the grammar
        (None, "created_at:gt:2026-13-01", None),
        (None, "created_at:gt:2026-02-30", None),  # days the calendar lacks
        (None, "created_at:gt:2026-04-31", None),
        (None, "created_at:gt:2100-02-29", None),  # 2100 is no leap year
        (None, "config.a:b:eq:1", None),  # a ':' in a filtered key
        (None, None, ",".join(["name"] * 65)),  # 65 fields, even the same one
    ],
)
def test_grammar_values_outside_the_patterns_are_refused(
    sort: str | None, rule: str | None, fields: str | None
) -> None:
    filters = [rule] if rule else []
    assert _refusal(sort, filters, fields) is not None
    outside = [
        value is not None and re.search(pattern, value) is None
        for value, pattern in (
            (sort, run_field_grammar.SORT),
            (rule, run_field_grammar.FILTER),
            (fields, run_field_grammar.FIELDS),
        )
    ]
    assert any(outside)


@pytest.mark.parametrize("day", ["2000-02-29", "2024-02-29", "1600-02-29", "2026-12-31"])
def test_grammar_leap_days_and_month_ends_are_taken(day: str) -> None:
    rule = f"created_at:lt:{day}"
    assert re.search(run_field_grammar.FILTER, rule) is not None
    assert _refusal(None, [rule], None) is None
