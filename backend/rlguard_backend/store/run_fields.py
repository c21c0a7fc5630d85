"""The fields a run list is sorted, filtered and widened by: each defined once, as SQL.

A field name is one of

===========================================  ====================================================
``id``, ``name``, ``project``, ``status``     the run's own text columns
``last_step``                                 its newest stored step
``created_at``, ``updated_at``                when it was created / last written (ISO 8601)
``config.<key>``, ``summary.<key>``           a value of its config or summary: ``<key>`` is a flat
                                              key (``"a.b"`` stored as one key) or a nested path
                                              (``a`` → ``b``); the flat key wins when both exist
``hparam.<name>``                             a headline hyper-parameter under any of its usual
                                              config names (``HPARAMS``)
``last.<signal>``                             the last stored value of the run's first key (by
                                              name) of that canonical signal (METRICS.md)
``alerts.open`` / ``.critical`` / ``.warn``   how many alerts of the run are open (of that
/ ``.info``                                   severity)
``health``                                    ``critical``, ``warn`` or ``ok``: its worst open
                                              WARN/CRITICAL alert (sorted worst last, ascending)
===========================================  ====================================================

A JSON value compares as a number when it is one and as text otherwise (``true``, ``"reward"``,
objects as their JSON). A filter is ``<field>:<op>[:<value>]`` with an op of ``FILTER_OPS``;
``contains`` and ``startswith`` ignore case.

>>> parse_sort("-last.reward_mean,name")
(SortKey(field='last.reward_mean', descending=True), SortKey(field='name', descending=False))
>>> parse_filter("config.lr:gt:1e-4")
Filter(field='config.lr', op='gt', value='1e-4')
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import ARRAY, Float, String, Text, case, cast, exists, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from rlguard.protocol import MAX_KEY_CHARS, to_wire
from rlguard_backend.models import Alert, MetricKey, Run
from rlguard_backend.signals import SIGNALS
from rlguard_backend.store import storage

# The config names each headline hyper-parameter goes by (TRL, verl, OpenRLHF, plain loops);
# the first one a run's config holds is shown.
HPARAMS: dict[str, tuple[str, ...]] = {
    "lr": (
        "lr",
        "learning_rate",
        "optim.lr",
        "actor_rollout_ref.actor.optim.lr",
        "actor_learning_rate",
    ),
    "kl_coef": (
        "kl_coef",
        "beta",
        "init_kl_coef",
        "kl_loss_coef",
        "actor_rollout_ref.actor.kl_loss_coef",
        "algorithm.kl_ctrl.kl_coef",
    ),
    "clip_ratio": (
        "clip_ratio",
        "clip_ratio_low",
        "epsilon",
        "eps_clip",
        "cliprange",
        "actor_rollout_ref.actor.clip_ratio",
    ),
    "kl_placement": ("kl_placement",),
}
SEVERITIES = ("critical", "warn", "info")
TEXT_COLUMNS = {"id": Run.id, "name": Run.name, "project": Run.project, "status": Run.status}
DATE_COLUMNS = {"created_at": Run.created_at, "updated_at": Run.updated_at}
NUMBER_OPS = ("lt", "le", "gt", "ge")
TEXT_OPS = ("contains", "startswith")
FILTER_OPS = ("eq", "ne", *NUMBER_OPS, *TEXT_OPS, "blank", "notblank")
MAX_SORT_KEYS = 4
MAX_FIELDS = 64
SIGNAL_NAMES = frozenset(s.name for s in SIGNALS)
_FILTER = re.compile(rf"^(?P<field>.+?):(?P<op>{'|'.join(FILTER_OPS)})(?::(?P<value>.*))?$", re.S)


@dataclass(frozen=True)
class SortKey:
    field: str
    descending: bool = False


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: str | None = None


@dataclass(frozen=True)
class FieldExpr:
    """A field as SQL: compared as a number, as text, or both (JSON values)."""

    name: str
    number: Any  # a SQL expression, or None
    text: Any
    is_date: bool = False
    shows_text: bool = False  # shown by its text though sorted by its number (health)


def parse_sort(spec: str) -> tuple[SortKey, ...]:
    """``"-a,b"``: by ``a`` descending, then ``b`` ascending."""
    keys = tuple(
        SortKey(part.strip().removeprefix("-"), part.strip().startswith("-"))
        for part in spec.split(",")
        if part.strip()
    )
    if len(keys) > MAX_SORT_KEYS:
        raise ValueError(f"at most {MAX_SORT_KEYS} sort fields, got {len(keys)}")
    for key in keys:
        check_field(key.field)
    return keys


def parse_filter(spec: str) -> Filter:
    """One ``<field>:<op>[:<value>]`` filter of the runs grid; ValueError names the grammar."""
    match = _FILTER.match(spec)
    if match is None:
        raise ValueError(
            f"filter {spec[:80]!r} is not <field>:<op>[:<value>] with op one of "
            f"{', '.join(FILTER_OPS)} (e.g. config.lr:gt:0.0001)"
        )
    field, op, value = match["field"], match["op"], match["value"]
    check_field(field)
    if op in ("blank", "notblank"):
        return Filter(field, op)
    if value is None:
        raise ValueError(f"filter {spec[:80]!r}: {op} needs a value, as in {field}:{op}:<value>")
    return Filter(field, op, value)


def parse_fields(spec: str) -> tuple[str, ...]:
    """``"hparam.lr,last.entropy"``: the computed fields each listed run carries in ``values``."""
    listed = [part.strip() for part in spec.split(",") if part.strip()]
    if len(listed) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} fields, got {len(listed)}")
    names = tuple(dict.fromkeys(listed))
    for name in names:
        check_field(name)
    return names


def check_field(name: str) -> None:
    """Raise ValueError naming the fix unless ``name`` is a field (see the module docstring)."""
    if name in TEXT_COLUMNS or name in DATE_COLUMNS or name in ("last_step", "health"):
        return
    prefix, dot, rest = name.partition(".")
    if not dot or not rest:
        raise ValueError(
            f"unknown field {name[:80]!r}: use id, name, project, status, last_step, created_at, "
            "updated_at, health, config.<key>, summary.<key>, hparam.<name>, last.<signal> or "
            "alerts.<open|critical|warn|info>"
        )
    if prefix in ("config", "summary"):
        if len(rest) > MAX_KEY_CHARS or '"' in rest or "\x00" in rest:
            raise ValueError(
                f"field {name[:80]!r}: a key of at most {MAX_KEY_CHARS} characters, "
                "without double quotes or NUL"
            )
    elif prefix == "hparam" and rest not in HPARAMS:
        raise ValueError(f"unknown hparam {rest[:80]!r}; known: {', '.join(HPARAMS)}")
    elif prefix == "last" and rest not in SIGNAL_NAMES:
        raise ValueError(
            f"unknown signal {rest[:80]!r} in {name[:80]!r}; canonical signals: "
            f"{', '.join(sorted(SIGNAL_NAMES))}"
        )
    elif prefix == "alerts" and rest not in ("open", *SEVERITIES):
        raise ValueError(f"unknown field {name[:80]!r}: use alerts.open or alerts.<severity>")
    elif prefix not in ("config", "summary", "hparam", "last", "alerts"):
        raise ValueError(
            f"unknown field {name[:80]!r}: prefixes are config., summary., hparam., last. "
            "and alerts."
        )


def field_expr(name: str, dialect: str) -> FieldExpr:
    """The SQL of a checked field, correlated with ``runs`` (usable in WHERE, ORDER BY, SELECT)."""
    if name in TEXT_COLUMNS:
        return FieldExpr(name, None, TEXT_COLUMNS[name])
    if name in DATE_COLUMNS:
        return FieldExpr(name, DATE_COLUMNS[name], None, is_date=True)
    if name == "last_step":
        return FieldExpr(name, Run.last_step, None)
    if name == "health":
        return _health()
    prefix, _, rest = name.partition(".")
    if prefix in ("config", "summary"):
        column = Run.config if prefix == "config" else Run.summary
        return FieldExpr(name, *_json_key(column, rest, dialect))
    if prefix == "hparam":
        found = [_json_key(Run.config, key, dialect) for key in HPARAMS[rest]]
        return FieldExpr(name, _coalesce([n for n, _ in found]), _coalesce([t for _, t in found]))
    if prefix == "last":
        return FieldExpr(name, _last_value(rest), None)
    return FieldExpr(name, _open_alerts(None if rest == "open" else rest), None)


def where(expr: FieldExpr, rule: Filter) -> ColumnElement[bool]:
    """The condition a filter puts on one field; ValueError when the op does not fit the field."""
    if rule.op in ("blank", "notblank"):
        present = [e.is_not(None) for e in (expr.number, expr.text) if e is not None]
        anything = present[0] if len(present) == 1 else present[0] | present[1]
        return ~anything if rule.op == "blank" else anything
    assert rule.value is not None
    number = _number(rule.value, expr) if expr.number is not None else None
    if expr.is_date and number is None:
        raise ValueError(
            f"filter {expr.name}:{rule.op}:{rule.value[:40]}: {rule.value.strip()[:40]!r} is not "
            "a date on the calendar; write one as 2026-03-01 or 2026-03-01T12:00:00Z"
        )
    if rule.op in NUMBER_OPS:
        if expr.number is None or number is None:
            raise ValueError(_mismatch(expr, rule, "a number" if expr.text is None else "text"))
        return getattr(expr.number, f"__{rule.op}__")(number)
    if rule.op in TEXT_OPS:
        if expr.text is None:
            raise ValueError(_mismatch(expr, rule, "a number"))
        wanted = rule.value.lower()
        lowered = func.lower(expr.text)
        if rule.op == "contains":
            return lowered.contains(wanted, autoescape=True)
        return lowered.startswith(wanted, autoescape=True)
    equal = _equal(expr, rule.value, number)
    return equal if rule.op == "eq" else ~equal  # "ne" keeps the runs without the field


def order_by(expr: FieldExpr, descending: bool) -> list[Any]:
    """Numbers first, by value, then text; runs without the field last either way."""
    terms = [e for e in (expr.number, expr.text) if e is not None]
    return [(e.desc() if descending else e.asc()).nulls_last() for e in terms]


def shown(value_number: Any, value_text: Any, expr: FieldExpr) -> Any:
    """A selected field's value for the wire: a number when it is one, else text (or None)."""
    if expr.shows_text:
        return value_text
    if expr.is_date and isinstance(value_number, datetime):
        moment = value_number if value_number.tzinfo else value_number.replace(tzinfo=timezone.utc)
        return moment.isoformat()
    if isinstance(value_number, int | float) and not isinstance(value_number, bool):
        number = float(value_number)
        if not math.isfinite(number):
            return to_wire(number)
        return value_number
    return value_text


def _mismatch(expr: FieldExpr, rule: Filter, kind: str) -> str:
    usable = "eq, ne, lt, le, gt, ge" if expr.text is None else "eq, ne, contains, startswith"
    return (
        f"filter {expr.name}:{rule.op}:{(rule.value or '')[:40]} does not fit: {expr.name} is "
        f"{kind} here; use {usable}, blank or notblank"
        + (" with a number" if rule.op in NUMBER_OPS and expr.number is not None else "")
    )


def _number(value: str, expr: FieldExpr) -> Any:
    if expr.is_date:
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _equal(expr: FieldExpr, value: str, number: Any) -> ColumnElement[bool]:
    tests: list[ColumnElement[bool]] = []  # NULL-safe: a missing value is "not equal"
    if expr.number is not None and number is not None:
        tests.append(func.coalesce(expr.number == number, False))
    if expr.text is not None:
        tests.append(func.coalesce(expr.text == value, False))
    if not tests:
        raise ValueError(f"filter {expr.name}:eq needs a number: {expr.name} is a number")
    return tests[0] if len(tests) == 1 else tests[0] | tests[1]


def _coalesce(parts: Sequence[ColumnElement[Any]]) -> ColumnElement[Any]:
    return parts[0] if len(parts) == 1 else func.coalesce(*parts)


def _json_key(column: Any, key: str, dialect: str) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """(number, text) of ``key`` in a JSON column: the flat key, else the dotted path."""
    paths = [[key]] if "." not in key else [[key], key.split(".")]
    found = [_json_path(column, path, dialect) for path in paths]
    return _coalesce([n for n, _ in found]), _coalesce([t for _, t in found])


def _json_path(
    column: Any, path: list[str], dialect: str
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    if dialect == "postgresql":
        parts = literal(path, ARRAY(Text))
        kind = func.json_typeof(column.op("#>")(parts))
        raw = column.op("#>>", return_type=Text)(parts)
        return case((kind == "number", cast(raw, Float))), case((kind == "null", None), else_=raw)
    where_ = literal("$" + "".join(f'."{part}"' for part in path))
    kind = func.json_type(column, where_)
    raw = func.json_extract(column, where_)
    number = case((kind.in_(("integer", "real")), cast(raw, Float)))
    text = case(
        (kind == "true", "true"),
        (kind == "false", "false"),
        (kind == "null", None),
        else_=cast(raw, String),
    )
    return number, text


def _last_value(signal: str) -> ColumnElement[Any]:
    """The last value the point store holds of the run's first key (by name) of ``signal``."""
    first_key = (
        select(MetricKey.id)
        .where(MetricKey.run_id == Run.id, MetricKey.signal == signal)
        .order_by(MetricKey.name)
        .limit(1)
        .correlate(Run)  # with the listed run, through the store's subquery around it
        .scalar_subquery()
    )
    return storage.STORE.last_value_sql(first_key)


def _standing() -> ColumnElement[bool]:
    """An alert open now, or open when its run ended (closed with it): what the run's health
    and alert counts show, so a run that ended collapsing still reads critical."""
    return or_(Alert.status == "open", Alert.closed_with_run.is_(True))


def _open_alerts(severity: str | None) -> ColumnElement[Any]:
    query = select(func.count(Alert.id)).where(Alert.run_id == Run.id, _standing())
    if severity is not None:
        query = query.where(Alert.severity == severity)
    return query.scalar_subquery()


def _health() -> FieldExpr:
    def worst(severity: str) -> ColumnElement[bool]:
        return exists().where(Alert.run_id == Run.id, _standing(), Alert.severity == severity)

    rank = case((worst("critical"), 2), (worst("warn"), 1), else_=0)
    label = case((worst("critical"), "critical"), (worst("warn"), "warn"), else_="ok")
    return FieldExpr("health", rank, label, shows_text=True)
