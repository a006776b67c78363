"""Recodings by a fixed rule, as sdcMicro offers them: ``top-bottom-coding`` (``topBotCoding``:
values above a threshold, or below one, replaced) and ``global-recode`` (``globalRecode``: a
number becomes the interval of given breaks it falls in, labelled as R's ``cut`` labels it; or
categories of a nominal column merged). Both are one DuckDB query over the records (a ``CASE``
expression per column), so they stream.

Each record is its own class (``_class`` = its ``_row``, which the engine renumbers by the
published values), and each changed column is declared (:meth:`Algorithm.perturbs`) with its
rule, stated exactly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import pyarrow as pa

from anonflow.api import (CLASS, ROW, Algorithm, InputError, Param, StepContext, TypedTable, generalization,
                          mark_generalized, sql_ident)

from .. import __version__

#: the keys of one column's top/bottom coding
TOP_BOTTOM_KEYS = ("top", "top_value", "bottom", "bottom_value")
#: the keys of one column's global recoding by breaks, and by merges
BREAK_KEYS = ("breaks", "labels", "right", "include_lowest", "outside")
MERGE_KEYS = ("merge",)


def _number(value: Any, what: str) -> float:
    """A number given in a parameter (R's ``Inf`` / ``-Inf`` accepted as text)."""
    if isinstance(value, str) and value.strip() in ("Inf", "+Inf", "-Inf", "inf", "-inf"):
        return math.inf if not value.strip().startswith("-") else -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise InputError(f"{what} must be a number, got {value!r}")
    return float(value)


def number_text(x: float) -> str:
    """A break as a label writes it: an integral number without ``.0``, others as the shortest
    text that reads back as the number, infinities as R writes them (``Inf``, ``-Inf``)."""
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if x == int(x) and abs(x) < 2 ** 63:
        return str(int(x))
    return repr(float(x))


def json_number(x: float) -> float | int | str:
    """A number as a declaration states it (JSON has no infinity: ``"Inf"`` / ``"-Inf"``)."""
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return int(x) if x == int(x) and abs(x) < 2 ** 53 else x


def cut_labels(breaks: list[float], right: bool = True, include_lowest: bool = False) -> list[str]:
    """R's ``cut`` labels of the intervals between consecutive ``breaks``: ``(a,b]`` (right-closed,
    R's default) or ``[a,b)``; ``include_lowest`` closes the first interval on the left (right-closed)
    or the last on the right (left-closed), as ``[a,b]``."""
    out = []
    k = len(breaks) - 1
    for i in range(k):
        a, b = number_text(breaks[i]), number_text(breaks[i + 1])
        if right:
            left = "[" if include_lowest and i == 0 else "("
            out.append(f"{left}{a},{b}]")
        else:
            closing = "]" if include_lowest and i == k - 1 else ")"
            out.append(f"[{a},{b}{closing}")
    return out


def _sql_literal(x: float) -> str:
    if math.isinf(x):
        return "'Infinity'::DOUBLE" if x > 0 else "'-Infinity'::DOUBLE"
    return f"{float(x)!r}::DOUBLE"


def _text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _numeric(table: TypedTable, column: str, plugin: str) -> pa.DataType:
    """The column's Arrow type, which must be numeric."""
    if column not in table.columns or column in (ROW, CLASS):
        raise InputError(f"{plugin}: column {column!r} is not in the table")
    if generalization(table, column):
        raise InputError(f"{plugin}: column {column!r} holds generalized labels from an earlier step, not numbers")
    t = table.schema.field(column).type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        raise InputError(f"{plugin} works on numbers, but column {column!r} holds {t} values")
    return t


def _spec(columns: Any, plugin: str) -> dict[str, dict[str, Any]]:
    if not isinstance(columns, Mapping) or not columns:
        raise InputError(f"{plugin}: parameter 'columns' must map each column to its rule, got {columns!r}")
    out = {}
    for col, rule in columns.items():
        if not isinstance(rule, Mapping):
            raise InputError(f"{plugin}: the rule for column {col!r} must be a mapping, got {rule!r}")
        out[str(col)] = dict(rule)
    return out


def _rest(table: TypedTable, changed: Mapping[str, str], extra: list[str] = ()) -> str:
    """The SELECT list: every input column (``changed`` ones by their expression), ``extra``
    columns, then ``_class``."""
    parts = [f"{changed[c]} AS {sql_ident(c)}" if c in changed else f"t.{sql_ident(c)}"
             for c in table.columns if c != CLASS]
    return ", ".join(parts + list(extra) + [f"CAST(t.{sql_ident(ROW)} AS BIGINT) AS {sql_ident(CLASS)}"])


def _select(ctx: StepContext, query: str, table: TypedTable, typing: Any, hierarchies: Mapping[str, Any]) -> TypedTable:
    """The query's records (over ``base`` = ``table``) as the output: written to the store in a
    run (``ctx.derive``), or in memory where the context has no store to write to (``apply``)."""
    if ctx.derive is not None:
        out = ctx.derive(query, base=table)
        return TypedTable(None, typing, {}, dict(hierarchies), stored=out.stored)
    return TypedTable(ctx.sql(query, base=table), typing, {}, dict(hierarchies))


class _Recode(Algorithm):
    """A deterministic rule: ``apply`` publishes a new batch by the release's rule as ``run``
    did (no randomness, nothing fitted)."""

    def apply(self, table: TypedTable, published: TypedTable, params: Mapping[str, Any], ctx: StepContext,
              fitted: Mapping[str, Any] | None = None) -> tuple[TypedTable, dict[str, Any]]:
        out = self.run(table, params, ctx)
        ctx.note(f"{self.name}: the release's rule applied to {table.num_rows} new record(s) as it was to the "
                 "original ones (a fixed rule: no randomness)")
        return out.replace(typing=published.typing), {"rule": self.perturbs(params)}


# -- top and bottom coding ----------------------------------------------------------------------

def top_bottom_rules(params: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``columns`` checked: per column ``top`` and/or ``bottom`` (numbers, bottom <= top) and
    their replacements (default: the threshold itself)."""
    out = {}
    for col, rule in _spec(params.get("columns"), "top-bottom-coding").items():
        odd = [k for k in rule if k not in TOP_BOTTOM_KEYS]
        if odd:
            raise InputError(f"top-bottom-coding: unknown key {odd[0]!r} for column {col!r} (expected "
                             f"{', '.join(TOP_BOTTOM_KEYS)})")
        if rule.get("top") is None and rule.get("bottom") is None:
            raise InputError(f"top-bottom-coding: column {col!r} needs 'top' or 'bottom'")
        r: dict[str, float] = {}
        for side in ("top", "bottom"):
            if rule.get(side) is None:
                if rule.get(f"{side}_value") is not None:
                    raise InputError(f"top-bottom-coding: column {col!r} has '{side}_value' but no '{side}'")
                continue
            r[side] = _number(rule[side], f"top-bottom-coding: '{side}' of column {col!r}")
            value = rule.get(f"{side}_value")
            r[f"{side}_value"] = r[side] if value is None else _number(value, f"top-bottom-coding: "
                                                                              f"'{side}_value' of column {col!r}")
            if math.isinf(r[side]) or math.isinf(r[f"{side}_value"]):
                raise InputError(f"top-bottom-coding: '{side}' and '{side}_value' of column {col!r} must be finite")
        if "top" in r and "bottom" in r and r["bottom"] > r["top"]:
            raise InputError(f"top-bottom-coding: column {col!r} has bottom {number_text(r['bottom'])} above top "
                             f"{number_text(r['top'])}")
        out[col] = r
    return out


class TopBottomCoding(_Recode):
    name = "top-bottom-coding"
    version = __version__
    description = ("Top and bottom coding, as sdcMicro's topBotCoding(): values above 'top' (below 'bottom') "
                   "replaced by 'top_value' ('bottom_value').")
    params = (
        Param("columns", "dict",
              help="column -> {top, top_value, bottom, bottom_value}: x > top becomes top_value, x < bottom "
                   "becomes bottom_value (a replacement defaults to its threshold)"),
    )

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        return {col: {"kind": "recode", "method": "top-bottom-coding", **{k: json_number(v) for k, v in r.items()}}
                for col, r in top_bottom_rules(params).items()}

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        for col in top_bottom_rules(params):
            _numeric(table, col, self.name)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        rules = top_bottom_rules(params)
        exprs, counts = {}, []
        for col, r in rules.items():
            t = _numeric(table, col, self.name)
            x = f"t.{sql_ident(col)}"
            integral = pa.types.is_integer(t) and all(v == int(v) for k, v in r.items() if k.endswith("_value"))
            # a float NaN is greater than every number in DuckDB: it is left as it is
            guard = "" if pa.types.is_integer(t) else f" AND NOT isnan({x})"
            cases = []
            for side, op in (("top", ">"), ("bottom", "<")):
                if side in r:
                    cond = f"{x} {op} {_sql_literal(r[side])}{guard}"
                    value = str(int(r[f"{side}_value"])) if integral else _sql_literal(r[f"{side}_value"])
                    cases.append(f"WHEN {cond} THEN {value}")
                    counts.append((col, side, f"count(*) FILTER (WHERE {cond})"))
                else:
                    counts.append((col, side, "0"))
            cast = t_sql(t) if integral else "DOUBLE"
            exprs[col] = f"CAST(CASE {' '.join(cases)} ELSE {x} END AS {cast})"
        tally = ctx.sql(f"SELECT {', '.join(c for _, _, c in counts)} FROM base t", base=table).to_pylist()[0]
        values = list(tally.values())
        for i, col in enumerate(rules):
            top, bottom = int(values[2 * i]), int(values[2 * i + 1])
            ctx.note(f"top-bottom-coding {col!r}: {top} value(s) top-coded, {bottom} bottom-coded "
                     f"of {table.num_rows}")
        return _select(ctx, f"SELECT {_rest(table, exprs)} FROM base t", table, table.typing, table.hierarchies)


def t_sql(t: pa.DataType) -> str:
    """DuckDB's name of an integer Arrow type."""
    return {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
            pa.uint8(): "UTINYINT", pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER",
            pa.uint64(): "UBIGINT"}.get(t, "BIGINT")


# -- global recoding -------------------------------------------------------------------------------

def recode_rules(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``columns`` checked: per column either breaks (strictly increasing numbers, at least two;
    labels, one per interval and distinct, default R's ``cut`` labels) or a merge (new category ->
    [old categories], none named twice)."""
    out = {}
    for col, rule in _spec(params.get("columns"), "global-recode").items():
        if ("breaks" in rule) == ("merge" in rule):
            raise InputError(f"global-recode: column {col!r} needs either 'breaks' (a number column) or 'merge' "
                             "(a categorical column)")
        allowed = BREAK_KEYS if "breaks" in rule else MERGE_KEYS
        odd = [k for k in rule if k not in allowed]
        if odd:
            raise InputError(f"global-recode: unknown key {odd[0]!r} for column {col!r} (expected "
                             f"{', '.join(allowed)})")
        if "merge" in rule:
            out[col] = {"merge": _merge(rule["merge"], col)}
            continue
        breaks = rule["breaks"]
        if not isinstance(breaks, (list, tuple)) or len(breaks) < 2:
            raise InputError(f"global-recode: 'breaks' of column {col!r} must be a list of at least two numbers, "
                             f"got {breaks!r}")
        b = [_number(v, f"global-recode: a break of column {col!r}") for v in breaks]
        if any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
            raise InputError(f"global-recode: 'breaks' of column {col!r} must increase strictly, got "
                             f"[{', '.join(number_text(v) for v in b)}]")
        right, lowest = rule.get("right", True), rule.get("include_lowest", False)
        for key, v in (("right", right), ("include_lowest", lowest)):
            if not isinstance(v, bool):
                raise InputError(f"global-recode: '{key}' of column {col!r} must be true or false, got {v!r}")
        outside = rule.get("outside", "error")
        if outside not in ("error", "keep"):
            raise InputError(f"global-recode: 'outside' of column {col!r} must be 'error' or 'keep', got {outside!r}")
        labels = rule.get("labels")
        if labels is None:
            labels = cut_labels(b, right, lowest)
        elif (not isinstance(labels, (list, tuple)) or len(labels) != len(b) - 1
              or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in labels)):
            raise InputError(f"global-recode: 'labels' of column {col!r} must be {len(b) - 1} label(s), one per "
                             f"interval, got {labels!r}")
        labels = [str(v) for v in labels]
        if len(set(labels)) != len(labels):
            raise InputError(f"global-recode: 'labels' of column {col!r} name a label twice: {labels}")
        out[col] = {"breaks": b, "labels": labels, "right": right, "include_lowest": lowest, "outside": outside}
    return out


def _merge(merge: Any, col: str) -> dict[str, list[str]]:
    if not isinstance(merge, Mapping) or not merge:
        raise InputError(f"global-recode: 'merge' of column {col!r} must map each new category to a list of old "
                         f"ones, got {merge!r}")
    seen: dict[str, str] = {}
    out = {}
    for new, olds in merge.items():
        if isinstance(olds, (str, int)) and not isinstance(olds, bool):
            olds = [olds]
        if not isinstance(olds, (list, tuple)) or not olds or not all(
                isinstance(o, (str, int)) and not isinstance(o, bool) for o in olds):
            raise InputError(f"global-recode: merge {new!r} of column {col!r} must list old categories, got {olds!r}")
        for o in map(str, olds):
            if o in seen:
                raise InputError(f"global-recode: category {o!r} of column {col!r} is merged into both "
                                 f"{seen[o]!r} and {str(new)!r}")
            seen[o] = str(new)
        out[str(new)] = [str(o) for o in olds]
    return out


def _interval_exprs(x: str, rule: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """SQL for the label, the lower and upper bound, and "outside every interval" of ``x``."""
    b, labels, right, lowest = rule["breaks"], rule["labels"], rule["right"], rule["include_lowest"]
    k = len(labels)
    label_cases, lo_cases, hi_cases = [], [], []
    for i in range(k):
        a, c = _sql_literal(b[i]), _sql_literal(b[i + 1])
        if right:
            lower = ">=" if lowest and i == 0 else ">"
            cond = f"{x} {lower} {a} AND {x} <= {c}"
        else:
            upper = "<=" if lowest and i == k - 1 else "<"
            cond = f"{x} >= {a} AND {x} {upper} {c}"
        label_cases.append(f"WHEN {cond} THEN {_text(labels[i])}")
        lo_cases.append(f"WHEN {cond} THEN {a}")
        hi_cases.append(f"WHEN {cond} THEN {c}")
    first, last = _sql_literal(b[0]), _sql_literal(b[-1])
    if right:
        inside = f"({x} {'>=' if lowest else '>'} {first} AND {x} <= {last})"
    else:
        inside = f"({x} >= {first} AND {x} {'<=' if lowest else '<'} {last})"
    outside = f"({x} IS NOT NULL AND (isnan(CAST({x} AS DOUBLE)) OR NOT {inside}))"
    if rule["outside"] == "keep":
        as_text = (f"CASE WHEN CAST({x} AS DOUBLE) = round(CAST({x} AS DOUBLE)) AND abs(CAST({x} AS DOUBLE)) < 1e15 "
                   f"THEN CAST(CAST({x} AS BIGINT) AS VARCHAR) ELSE CAST(CAST({x} AS DOUBLE) AS VARCHAR) END")
        els_label, els_bound = f" ELSE {as_text}", f" ELSE CAST({x} AS DOUBLE)"
    else:
        els_label = els_bound = ""
    return (f"CASE {' '.join(label_cases)}{els_label} END", f"CASE {' '.join(lo_cases)}{els_bound} END",
            f"CASE {' '.join(hi_cases)}{els_bound} END", outside)


class GlobalRecode(_Recode):
    name = "global-recode"
    version = __version__
    description = ("Global recoding, as sdcMicro's globalRecode(): numbers to the intervals of given breaks "
                   "(R's cut labels, right-closed by default), or categories merged.")
    params = (
        Param("columns", "dict",
              help="column -> {breaks: [...], labels, right (true), include_lowest (false), outside (error|keep)} "
                   "for a number column, or {merge: {new: [old, ...]}} for a categorical one"),
    )

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        out = {}
        for col, rule in recode_rules(params).items():
            what: dict[str, Any] = {"kind": "recode", "method": "global-recode"}
            if "merge" in rule:
                what["merge"] = rule["merge"]
            else:
                what.update(breaks=[json_number(v) for v in rule["breaks"]], labels=rule["labels"],
                            right=rule["right"], include_lowest=rule["include_lowest"], outside=rule["outside"])
            out[col] = what
        return out

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        self._typing(table, recode_rules(params))

    def _typing(self, table: TypedTable, rules: Mapping[str, Mapping[str, Any]]):
        """The output's typing: a column recoded by breaks keeps its role and type and is marked
        generalized as intervals, with its bounds ``<column>_lo`` / ``<column>_hi``; a merged
        ordinal column's order becomes its new categories in the old order (merges must be runs
        of that order)."""
        typing = table.typing
        for col, rule in rules.items():
            if col not in table.columns or col in (ROW, CLASS):
                raise InputError(f"global-recode: column {col!r} is not in the table")
            if col not in typing:
                raise InputError(f"global-recode: column {col!r} has no typing; name it in the typing step")
            if generalization(table, col):
                raise InputError(f"global-recode: column {col!r} holds generalized labels from an earlier step")
            if "breaks" in rule:
                _numeric(table, col, self.name)
                lo, hi = f"{col}_lo", f"{col}_hi"
                taken = [c for c in (lo, hi) if c in table.columns]
                if taken:
                    raise InputError(f"global-recode: column {col!r} would publish its bounds as {taken[0]!r}, "
                                     "which the table holds already")
                typing = mark_generalized(typing, col, "interval", lo=lo, hi=hi)
                continue
            attr = typing.get(col)
            if attr.type not in ("nominal", "ordinal"):
                raise InputError(f"global-recode merges categories, but column {col!r} is typed {attr.type}; type "
                                 "it nominal or ordinal, or recode it by 'breaks'")
            t = table.schema.field(col).type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                    or pa.types.is_dictionary(t)):
                raise InputError(f"global-recode: merges need a text or integer column; {col!r} holds {t} values")
            if attr.type == "ordinal" and attr.order:
                order = self._merged_order(list(attr.order), rule["merge"], col)
                typing = typing.replace(dataclasses.replace(a, order=tuple(order), weights=None)
                                        if a.name == col else a for a in typing.attributes)
        return typing

    @staticmethod
    def _merged_order(order: list[str], merge: Mapping[str, list[str]], col: str) -> list[str]:
        new_of = {o: new for new, olds in merge.items() for o in olds}
        mapped = [new_of.get(c, c) for c in order]
        out: list[str] = []
        for v in mapped:
            if out and out[-1] == v:
                continue
            if v in out:
                raise InputError(f"global-recode: merge {v!r} of ordinal column {col!r} is not a run of "
                                 f"consecutive categories of its order")
            out.append(v)
        return out

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        rules = recode_rules(params)
        typing = self._typing(table, rules)
        exprs: dict[str, str] = {}
        extra: list[str] = []
        for col, rule in rules.items():
            x = f"t.{sql_ident(col)}"
            if "merge" in rule:
                self._check_categories(table, col, rule["merge"], ctx)
                key = f"CAST({x} AS VARCHAR)"
                cases = " ".join(f"WHEN {key} IN ({', '.join(_text(o) for o in olds)}) THEN {_text(new)}"
                                 for new, olds in rule["merge"].items())
                exprs[col] = f"CASE {cases} ELSE {key} END"
                continue
            label, lo, hi, outside = _interval_exprs(x, rule)
            if rule["outside"] == "error":
                found = ctx.sql(f"SELECT count(*) AS n, min({x}) AS v FROM base t WHERE {outside}",
                                base=table).to_pylist()[0]
                if found["n"]:
                    labels = rule["labels"]
                    raise InputError(f"global-recode: column {col!r} has {found['n']} value(s) outside its intervals "
                                     f"{labels[0]} .. {labels[-1]} (breaks {number_text(rule['breaks'][0])} to "
                                     f"{number_text(rule['breaks'][-1])}), the least {found['v']!r}; widen the "
                                     "breaks or set outside: keep")
            exprs[col] = label
            extra += [f"{lo} AS {sql_ident(col + '_lo')}", f"{hi} AS {sql_ident(col + '_hi')}"]
        hierarchies = {k: v for k, v in table.hierarchies.items() if k not in rules}
        return _select(ctx, f"SELECT {_rest(table, exprs, extra)} FROM base t", table, typing, hierarchies)

    @staticmethod
    def _check_categories(table: TypedTable, col: str, merge: Mapping[str, list[str]], ctx: StepContext) -> None:
        """Every old category a merge names is a value of the column."""
        named = sorted({o for olds in merge.values() for o in olds})
        rows = ctx.sql(f"SELECT DISTINCT CAST({sql_ident(col)} AS VARCHAR) AS v FROM base", base=table).to_pylist()
        present = {r["v"] for r in rows}
        unknown = [o for o in named if o not in present]
        if unknown:
            raise InputError(f"global-recode: merge of column {col!r} names {unknown[0]!r}, which is not a value of "
                             "the column")


PLUGINS = [TopBottomCoding(), GlobalRecode()]
