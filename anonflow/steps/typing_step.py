"""The built-in ``typing`` step (:class:`TypingStep`): roles and types of the columns.

The missing-value policy (:data:`anonflow.schema.MISSING_CATEGORY`; common spellings of
"missing", :data:`MISSING_SPELLINGS`, must be declared), type inference (:func:`infer_type`),
the sampling-weight column (role ``weight``: numeric, finite and positive, :func:`_weight_cast`),
and the refusals that keep a table publishable: undeclared columns that look like identifiers,
column names a spreadsheet would run as formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..api import StepContext
from ..errors import InputError, WorkflowError
from ..grading import Grading, check_grading_against, load_grading
from ..params import Param, suggest
from ..schema import FRAGMENT, MISSING_CATEGORY, ROW, TYPES, Attribute, Typing
from ..store import ident
from ..table import TypedTable
from ..shapes import ROLE_COLUMNS
from .step import Step, StepOutput, StepRun

_ROLE_PARAMS = ("quasi", "sensitive", "label", "insensitive", "identifier", "weight")


def _role_entries(value: Any, role: str, where: str) -> dict[str, dict[str, Any]]:
    """Normalize ``[a, b]`` or ``{a: type, b: {type: ordinal, order: [...]}}`` to ``{col: spec}``."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        out: dict[str, dict[str, Any]] = {}
        for item in value:
            for k, v in (item.items() if isinstance(item, Mapping) else [(item, None)]):
                if str(k) in out:  # [age, age]: a typo for another column, or a type given twice
                    raise WorkflowError(f"column {str(k)!r} is listed twice under {role!r}; name each column once",
                                        where=where)
                out[str(k)] = _type_spec(v, role, str(k), where)
        return out
    if isinstance(value, Mapping):
        value = [dict([kv]) for kv in value.items()]  # {2019: x, '2019': y} names one column twice
        return _role_entries(value, role, where)
    raise WorkflowError(f"parameter {role!r}: expected a list of columns or a mapping column -> type, got {value!r}",
                        where=where)


def _type_spec(value: Any, role: str, column: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, Mapping):
        raise WorkflowError(f"{role} column {column!r}: expected a type name or {{type: ..., order: [...]}}, got {value!r}",
                            where=where)
    spec = dict(value)
    keys = ("type", "order", "weights", "beta", "w12", "grading")
    for key in spec:
        if key not in keys:
            raise WorkflowError(f"{role} column {column!r}: unknown key {key!r}{suggest(key, keys)}; "
                                f"expected {', '.join(keys)}", where=where)
    t = spec.get("type")
    for key in ("beta", "w12"):
        if key in spec:
            if t != "semantic":
                raise WorkflowError(f"{role} column {column!r}: {key!r} is a code hierarchy tree weight and "
                                    "needs type: semantic", where=where)
            v = spec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise WorkflowError(f"{role} column {column!r}: {key!r} must be a number >= 0, got {v!r}", where=where)
    if "grading" in spec and role != "sensitive":
        raise WorkflowError(f"column {column!r}: a sensitivity grading belongs to a sensitive attribute", where=where)
    if t is not None and t not in TYPES:
        raise WorkflowError(f"{role} column {column!r}: type must be one of {', '.join(TYPES)}, got {t!r}"
                            f"{suggest(str(t), TYPES)}", where=where)
    if "order" in spec:
        if t not in (None, "ordinal"):
            raise WorkflowError(f"{role} column {column!r}: 'order' is only for ordinal columns", where=where)
        spec["type"] = "ordinal"
        order = spec["order"]
        if not isinstance(order, list) or len(order) < 2:
            raise WorkflowError(f"{role} column {column!r}: 'order' must list at least two categories", where=where)
        if len(set(map(str, order))) != len(order):
            raise WorkflowError(f"{role} column {column!r}: 'order' lists a category twice", where=where)
    elif t == "ordinal":
        raise WorkflowError(f"{role} column {column!r}: an ordinal column needs 'order' (its categories, lowest first)",
                            where=where)
    if "weights" in spec:
        w = spec["weights"]
        n = len(spec.get("order") or [])
        if not isinstance(w, list) or len(w) != n - 1 or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in w):
            raise WorkflowError(f"{role} column {column!r}: 'weights' must be {n - 1} positive numbers "
                                "(one per step between consecutive categories)", where=where)
    return spec


class TypingStep(Step):
    uses = kind = "typing"
    cacheable = True
    preparation = True
    redone_by_apply = True
    makes_typing = True
    description = "Give each column a role and each quasi-identifier a type (SPEC section 1)."
    params = (
        Param("quasi", "any", default=[], shape=ROLE_COLUMNS,
              help="quasi-identifiers: a list, or a mapping column -> type (at least one is required)"),
        Param("sensitive", "any", default=[], shape=ROLE_COLUMNS, help="sensitive attributes"),
        Param("label", "any", default=[], shape=ROLE_COLUMNS, help="class labels, used only by utility metrics"),
        Param("insensitive", "any", default=[], shape=ROLE_COLUMNS, help="published unchanged"),
        Param("identifier", "any", default=[], shape=ROLE_COLUMNS, help="direct identifiers: dropped"),
        Param("weight", "str", default=None, nullable=True,
              help="the column of sampling weights (one column; below): published unchanged, used by "
                   "`individual-risk`"),
        Param("others", "str", default="drop", choices=("drop", "insensitive"),
              help="every column not named above: `drop` (never published; the run notes which) or `insensitive` "
                   "(published as it is)"),
        Param("missing", "str", default="error", choices=("error", "drop", "category"),
              help="missing values: `error`, `drop` (records dropped and counted in the run summary) or `category` "
                   "(text columns only: missing becomes the category `?`)"),
        Param("missing_values", "list", items="str", default=[],
              help="extra strings meaning \"missing\" (empty and whitespace-only cells always are)"),
        Param("not_missing", "list", items="str", default=[],
              help="common spellings of \"missing\" (below) that are real values in this data"),
    )

    def check_params(self, given, registry, where, base_dir=None):
        params = super().check_params(given, registry, where, base_dir)
        roles = self.roles(params, where)
        graded = {c: spec for c, (role, spec) in roles.items() if "grading" in spec}
        if graded:
            sens = dict(_role_entries(params["sensitive"], "sensitive", where))
            for column, spec in graded.items():
                sens[column] = {**spec, "grading": load_grading(spec["grading"], base_dir or Path.cwd(),
                                                                 where=f"{where}: grading of {column!r}")}
            params["sensitive"] = sens
        return params

    def roles(self, params: Mapping[str, Any], where: str) -> dict[str, tuple[str, dict[str, Any]]]:
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for role in _ROLE_PARAMS:
            for col, spec in _role_entries(params.get(role), role, where).items():
                if col in out:
                    raise WorkflowError(f"column {col!r} is given two roles: {out[col][0]} and {role}", where=where)
                if role == "identifier" and spec:
                    raise WorkflowError(f"identifier column {col!r} is dropped; it takes no type", where=where)
                out[col] = (role, spec)
        return out

    def validate(self, params, inputs, registry, where):
        roles = self.roles(params, where)
        _check_missing_params(params, where)
        if not any(r == "quasi" for r, _ in roles.values()):
            raise WorkflowError("name at least one quasi-identifier under 'quasi'", where=where)
        cols = inputs[0].columns
        if cols is None:
            return None
        if FRAGMENT in cols:
            raise WorkflowError(f"input {inputs[0].name!r} is partitioned; type the table first, then partition it",
                                where=where)
        for col in roles:
            if col not in cols:
                raise WorkflowError(f"column {col!r} is not in input {inputs[0].name!r}{suggest(col, cols)}; "
                                    f"its columns are: {', '.join(c for c in cols if c != ROW)}", where=where)
        keep = [c for c in cols if c == ROW or (c in roles and roles[c][0] != "identifier")
                or (c not in roles and params["others"] == "insensitive")]
        _check_column_names([c for c in keep if c != ROW], where)
        return tuple(keep)

    def run(self, source: TypedTable | pa.Table, params: Mapping[str, Any], ctx: StepContext,
            where: str) -> tuple[TypedTable, dict]:
        """Type ``source`` in the store. Every check is made on each column's distinct values
        (with their counts and first record, one ``GROUP BY`` per column), never on the
        records in Python; the typed records are a view of the source's (a projection, less
        the records dropped for missing values) or, when typing changes values (text read as
        numbers or codes, missing values made a category), a table written by DuckDB."""
        roles = self.roles(params, where)
        _check_missing_params(params, where)
        if isinstance(source, pa.Table):  # records given in memory: into the store first
            source = ctx.derive("SELECT * FROM records", ordered=False, records=source)
        names = source.columns
        n_in = source.num_rows
        summary: dict[str, Any] = {"records_in": n_in}
        keep = [c for c in names if c != ROW and (
            (c in roles and roles[c][0] != "identifier") or (c not in roles and params["others"] == "insensitive"))]
        _check_column_names(keep, where)
        dropped_cols = [c for c in names if c != ROW and c not in keep]
        if dropped_cols:
            summary["columns_dropped"] = dropped_cols
        undeclared = [c for c in names if c != ROW and c not in roles]
        if undeclared and params["others"] == "drop":
            ctx.note(f"columns not named in the typing were dropped (others: drop): {', '.join(undeclared)}")
        values = {c: _Values.of(source, c, ctx) for c in keep}
        for c in keep:
            if c in roles and roles[c][0] != "insensitive":
                continue
            why = _identifier_like(c, values[c])
            if why and c not in roles:
                raise InputError(f"column {c!r} is named in no role and {why}, so it looks like an identifier; "
                                 f"declare it under 'identifier' (dropped) or under 'insensitive' (published as it "
                                 "is, deliberately)", where=where)
            if why:
                ctx.note(f"column {c!r} is declared insensitive and is published as it is, though {why}")

        # missing values: nulls, NaN, empty and whitespace-only text, and the declared markers
        markers = pa.array(list(params["missing_values"]), type=pa.string())
        missing: dict[str, tuple[pa.Array, int]] = {}   # column -> (mask over its distinct values, records)
        for c in keep:
            vals = values[c]
            mask = vals.missing(markers)
            n_missing = int(vals.n[mask.to_numpy(zero_copy_only=False)].sum())
            if n_missing:
                missing[c] = (mask, n_missing)
            if roles.get(c, ("insensitive",))[0] in ("quasi", "sensitive", "label"):
                _check_missing_spellings(vals, c, missing.get(c, (None,))[0], params["not_missing"], where)
        conditions: list[str] = []   # SQL: the records to drop
        exprs = {c: f"t.{ident(c)}" for c in keep}   # each output column, in SQL over the records
        changes = False
        policy = params["missing"]
        if missing:
            counts = {c: n for c, (_, n) in missing.items()}
            if policy == "error":
                c, (mask, n) = next(iter(missing.items()))
                first = int(values[c].first[mask.to_numpy(zero_copy_only=False)].min())
                fix = "set missing: drop (drop those records, counted)" + (
                    " (a weight column cannot take missing: category)" if roles.get(c, ("",))[0] == "weight" else
                    " or missing: category" if _is_text(values[c].type) else
                    " (a number column cannot take missing: category)")
                raise InputError(f"column {c!r} has {n} missing value(s), the first in record {first + 1}; {fix}",
                                 where=where)
            for c, (mask, _) in missing.items():
                cond = values[c].missing_sql(f"t.{ident(c)}", mask)
                if policy == "drop":
                    conditions.append(cond)
                else:  # category
                    if roles.get(c, ("",))[0] == "weight":
                        raise InputError(f"weight column {c!r} has {missing[c][1]} missing value(s): a sampling "
                                         "weight cannot be a category; use missing: drop (or fill in the weights)",
                                         where=where)
                    if not _is_text(values[c].type):
                        raise InputError(f"column {c!r} is numeric: missing values cannot be a category; "
                                         "use missing: drop", where=where)
            if policy == "drop":
                summary["missing_by_column"] = counts
            else:
                summary["missing_as_category"] = counts
                ctx.note(f"missing values became the category {MISSING_CATEGORY!r} "
                         f"({', '.join(f'{c}: {n}' for c, n in counts.items())})")
        records = source
        if conditions:
            # the records kept, as a view: every later check sees only them
            records = ctx.relation(f"SELECT * FROM t WHERE NOT ({' OR '.join(conditions)})", t=source)
            summary["records_dropped_missing"] = n_in - records.num_rows
            ctx.note(f"dropped {summary['records_dropped_missing']} record(s) with missing values "
                     f"({', '.join(f'{c}: {n}' for c, n in summary['missing_by_column'].items())})")
            values = {c: _Values.of(records, c, ctx) for c in keep}
        attributes = []
        for c in keep:
            role, spec = roles.get(c, ("insensitive", {}))
            vals = values[c]
            if policy == "category" and c in missing:
                mask, _ = missing[c]
                cond = vals.missing_sql(f"t.{ident(c)}", mask)
                exprs[c] = f"CASE WHEN {cond} THEN {_literal(MISSING_CATEGORY)} ELSE t.{ident(c)} END"
                vals = vals.with_category(mask, MISSING_CATEGORY)
                changes = True
            if role == "weight":  # published unchanged (text holding numbers read as numbers), no type
                cast = _weight_cast(vals, c, ctx, where)
                if cast:
                    exprs[c] = f"CAST({exprs[c]} AS {cast})"
                    changes = True
                attributes.append(Attribute(name=c, role=role))
                continue
            declared = spec.get("type")
            typ = declared or (infer_type(vals.present()) if role in ("quasi", "sensitive", "label") else None)
            if not declared and typ == "nominal" and _is_text(vals.type):
                _check_mostly_numeric(vals, c, ctx, where)
            if typ == "continuous":
                cast = _number_cast(vals, c, ctx, where)
                _check_finite(vals, c, ctx, where, "declared" if declared else "inferred")
                if cast:
                    exprs[c] = f"CAST({exprs[c]} AS {cast})"
                    changes = True
            elif typ == "semantic":
                if _as_codes(vals, c, where):
                    exprs[c] = f"CAST({exprs[c]} AS VARCHAR)"
                    changes = True
            elif typ == "ordinal":
                _check_order(vals, c, spec["order"], where)
            options: dict[str, Any] = {}
            if typ == "semantic":
                options = {"beta": float(spec.get("beta", 1.0)), "w12": float(spec.get("w12", 0.0))}
            if "grading" in spec:
                grading = Grading.from_json(spec["grading"])
                graded = vals.present()
                if policy == "category" and c in missing:  # a missing value takes no level
                    graded = pc.drop_null(pc.filter(values[c].v, pc.invert(missing[c][0])))
                for note in check_grading_against(grading, pa.chunked_array([graded]), c, where):
                    ctx.note(note)
                options["grading"] = spec["grading"]
            attributes.append(Attribute(
                name=c, role=role, type=typ,
                order=tuple(map(str, spec["order"])) if "order" in spec else None,
                weights=tuple(float(w) for w in spec["weights"]) if "weights" in spec else None,
                source="declared" if declared else ("inferred" if typ else "declared"), options=options))
        summary["records_out"] = records.num_rows
        summary["typing"] = {a.name: f"{a.role}:{a.type}" if a.type else a.role for a in attributes}
        select = ", ".join([f"t.{ident(ROW)}"] + [f"{e} AS {ident(c)}" for c, e in exprs.items()])
        where_sql = f" WHERE NOT ({' OR '.join(conditions)})" if conditions else ""
        # no value changed: a view of the source's records; else DuckDB writes the typed table
        out = ctx.derive(f"SELECT {select} FROM t{where_sql}", t=source, view=not changes)
        return out.replace(typing=Typing(tuple(attributes), policy)), summary

    def execute(self, run: StepRun) -> StepOutput:
        typed, summary = self.run(run.tables[0], run.node.params, run.ctx, run.where)
        run.keep(typed)
        return StepOutput(summary=summary)

    def preview(self, summary: dict[str, Any], output: Any) -> dict[str, Any]:
        summary = dict(summary)
        notes = summary.pop("notes", [])
        return {"typing": output().typing, "summary": summary, "notes": notes}


def _literal(value: Any) -> str:
    """A value as an SQL literal (text quoted, numbers as they are)."""
    if isinstance(value, str):
        if "\0" in value:
            raise InputError("a value holds a NUL character")
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return repr(value)
    raise ValueError(f"cannot write {value!r} as an SQL literal")


@dataclass
class _Values:
    """A column's distinct values (null included, as one value), each with its number of
    records and its first record (``_row``), in order of first appearance."""

    v: pa.Array
    n: np.ndarray
    first: np.ndarray

    @classmethod
    def of(cls, table: TypedTable, column: str, ctx: StepContext) -> "_Values":
        got = ctx.sql(f"SELECT {ident(column)} AS v, count(*)::BIGINT AS n, min({ident(ROW)}) AS first "
                      f"FROM t GROUP BY 1 ORDER BY first", t=table)
        v = got.column("v")
        v = v.combine_chunks() if v.num_chunks != 1 else v.chunk(0)
        return cls(v, got.column("n").to_numpy(), got.column("first").to_numpy())

    @property
    def type(self) -> pa.DataType:
        return self.v.type

    def present(self) -> pa.Array:
        """The non-null distinct values."""
        return pc.drop_null(self.v)

    def missing(self, markers: pa.Array) -> pa.Array:
        """Which distinct values are missing: null, NaN, empty or whitespace-only text, a marker."""
        col = self.v
        mask = pc.is_null(col)
        if _is_text(col.type):
            blank = pc.equal(pc.utf8_trim_whitespace(col), "")
            if len(markers):
                blank = pc.or_(blank, pc.is_in(col, value_set=markers))
            mask = pc.or_(mask, pc.fill_null(blank, False))
        elif pa.types.is_floating(col.type):  # a NaN (a CSV's "NaN" reads as one) is missing too
            mask = pc.or_(mask, pc.fill_null(pc.is_nan(col), False))
        return mask

    def missing_sql(self, expr: str, mask: pa.Array) -> str:
        """An SQL condition true for the records whose value is missing; the missing spellings
        found in the data are written as quoted literals (a view keeps no parameters)."""
        parts = [f"{expr} IS NULL"]
        if _is_text(self.type):
            listed = [x for x in pc.filter(self.v, mask).to_pylist() if x is not None]
            if listed:
                parts.append(f"{expr} IN ({', '.join(_literal(x) for x in listed)})")
        elif pa.types.is_floating(self.type):
            parts.append(f"isnan({expr})")
        return "(" + " OR ".join(parts) + ")"

    def with_category(self, mask: pa.Array, category: str) -> "_Values":
        return _Values(pc.if_else(mask, pa.scalar(category), self.v), self.n, self.first)


#: first characters that make a spreadsheet read a cell as a formula (OWASP's list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _check_column_names(columns: Sequence[str], where: str) -> None:
    """A published column's name becomes a CSV header cell: one that a spreadsheet would run as
    a formula (``=HYPERLINK(...)``) is refused rather than published (data cells are escaped)."""
    for c in columns:
        if str(c).startswith(FORMULA_STARTS):
            raise InputError(f"column name {c!r} begins with {str(c)[0]!r}, so a spreadsheet opening the published "
                             "CSV would run it as a formula; rename the column in the source (or declare it under "
                             "'identifier' to drop it)", where=where)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


#: spellings of "missing" that a quasi-identifier, sensitive or label text column may not hold
#: unless the workflow says what they are (``missing_values`` or ``not_missing``); compared
#: after trimming whitespace, ignoring case.
MISSING_SPELLINGS = ("na", "n/a", "#n/a", "n.a.", "n.a", "na.", "n\\a", "<na>", "null", "(null)", "#null!",
                     "<null>", "none", "(none)", "nan", "nil", "missing", "unknown", "?", "-", "--", ".", "n/k",
                     "not available", "not known")


def _check_missing_params(params: Mapping[str, Any], where: str) -> None:
    both = set(map(str, params["missing_values"])) & set(map(str, params["not_missing"]))
    if both:
        raise WorkflowError(f"{sorted(both)[0]!r} is listed under both missing_values and not_missing; "
                            "keep it in one", where=where)
    if params["missing"] == "category" and MISSING_CATEGORY in map(str, params["not_missing"]):
        raise WorkflowError(f"not_missing lists {MISSING_CATEGORY!r}, but missing: category writes {MISSING_CATEGORY!r} "
                            "for a missing value: the two could not be told apart; use missing: drop, or recode "
                            f"the real value {MISSING_CATEGORY!r}", where=where)


def _check_missing_spellings(vals: "_Values", c: str, missing: Any, allowed: Sequence[str], where: str) -> None:
    """A common spelling of "missing" in a quasi-identifier, sensitive or label column must be
    declared: under ``missing_values`` (missing) or ``not_missing`` (a real value). Otherwise
    it would silently count as one more real, diverse value."""
    col = vals.v
    if not _is_text(col.type):
        return
    key = pc.utf8_lower(pc.utf8_trim_whitespace(col))
    odd = pc.is_in(key, value_set=pa.array(MISSING_SPELLINGS, pa.string()))
    if allowed:
        odd = pc.and_(odd, pc.invert(pc.is_in(col, value_set=pa.array(list(map(str, allowed)), pa.string()))))
    if missing is not None:
        odd = pc.and_(odd, pc.invert(missing))
    odd = np.asarray(pc.fill_null(odd, False).to_numpy(zero_copy_only=False), dtype=bool)
    if not odd.any():
        return
    found = pc.filter(col, pa.array(odd)).to_pylist()
    value, n = found[0], int(vals.n[odd][0])
    more = f" (and {len(found) - 1} other such spelling(s))" if len(found) > 1 else ""
    raise InputError(f"column {c!r} holds {value!r} {n} time(s){more}, a common spelling of a missing value; say "
                     f"what it is: missing_values: [{value!r}] (missing) or not_missing: [{value!r}] (a real value)",
                     where=where)


#: column names that say "identifier" (compared lowercase, as whole words: ``record_id``,
#: ``recordId``, ``Household ID``), and compact forms that end in ``id`` (``hhid``).
_ID_WORDS = frozenset(("id", "ids", "uid", "uuid", "guid", "pid", "hhid", "hid", "rid", "recid", "ssn", "sin",
                       "nino", "nhs", "medicare", "medicaid", "passport", "name", "names", "fullname", "firstname",
                       "lastname", "surname", "username", "email", "mail", "phone", "telephone", "mobile", "iban",
                       "address", "ip", "mac", "imei", "vin", "dob", "birthdate", "postcode", "license",
                       "licence", "socialsecurity", "taxid", "tin", "npi", "mrn"))
#: name fragments that say "identifier" wherever they appear (``SocialSecurityNumber``)
_ID_FRAGMENTS = ("socialsecurity", "nationalinsurance", "nationalid", "passport", "driverslicen", "taxpayer",
                 "medicalrecord", "healthcard", "ssn")
_ID_PREFIXES = ("household", "hh", "person", "pers", "record", "rec", "patient", "customer", "cust", "client",
                "user", "member", "respondent", "resp", "case", "row", "subject", "employee", "emp", "account")


def _identifier_like(name: str, vals: "_Values") -> str | None:
    """Why an undeclared column looks like a direct identifier (its name, or values distinct for
    at least 90 % of at least 20 records), or None."""
    import re

    import unicodedata

    name = unicodedata.normalize("NFKC", name)  # fullwidth "Ｉｄ" reads "Id"
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    words = [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]
    compact = "".join(words)
    if any(w in _ID_WORDS for w in words) or any(compact == p + "id" or compact == p + "no" for p in _ID_PREFIXES) \
            or any(f in compact for f in _ID_FRAGMENTS) \
            or (len(words) > 1 and words[-1] in ("number", "no", "num", "nr", "code") and words[-2] in _ID_WORDS):
        return "its name says so"
    valid = np.asarray(pc.is_valid(vals.v).to_numpy(zero_copy_only=False), dtype=bool)
    n = int(vals.n[valid].sum())
    if n >= 20:
        distinct = int(valid.sum())
        if distinct >= 0.9 * n:
            return f"its values are distinct for {distinct} of {n} records"
    return None


def infer_type(col: pa.ChunkedArray) -> str:
    """SPEC section 1 inference: numbers are continuous; equal-length digit strings are
    semantic codes; other strings are nominal."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "continuous"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        values = pc.drop_null(col)
        if len(values):
            lengths = pc.utf8_length(values)
            if pc.all(pc.utf8_is_digit(values)).as_py() and pc.min(lengths).as_py() == pc.max(lengths).as_py() \
                    and pc.min(lengths).as_py() > 1:
                return "semantic"
    return "nominal"


def _non_numbers(vals: "_Values", ctx: StepContext) -> tuple[int, int, int, Any]:
    """For a text column: (records whose value is a number, records whose value is not, the
    first bad record, its value), from the distinct values."""
    probe = pa.table({"v": vals.v.cast(pa.string()), "n": vals.n, "first": vals.first})
    row = ctx.sql("SELECT coalesce(sum(n) FILTER (WHERE TRY_CAST(v AS DOUBLE) IS NOT NULL), 0), "
                  "coalesce(sum(n) FILTER (WHERE TRY_CAST(v AS DOUBLE) IS NULL), 0), "
                  "min(first) FILTER (WHERE TRY_CAST(v AS DOUBLE) IS NULL), "
                  "arg_min(v, first) FILTER (WHERE TRY_CAST(v AS DOUBLE) IS NULL) "
                  "FROM probe WHERE v IS NOT NULL", probe=probe).to_pylist()[0]
    ok, bad, first, value = row.values()
    return int(ok), int(bad), first, value


def _number_cast(vals: "_Values", c: str, ctx: StepContext, where: str) -> str | None:
    """The SQL type a continuous column's values are cast to (None: they are numbers already)."""
    t = vals.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return None
    if pa.types.is_boolean(t):
        return "BIGINT"
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t)):
        raise InputError(f"column {c!r} has type {t}, which is not numeric; declare it nominal", where=where)
    _, bad, first, value = _non_numbers(vals, ctx)
    if bad:
        raise InputError(f"column {c!r} is declared continuous but record {first + 1} has the value {value!r}, "
                         "which is not a number; fix the value, declare the column nominal, or list the value "
                         "under missing_values", where=where)
    return "DOUBLE"


def _check_finite(vals: "_Values", c: str, ctx: StepContext, where: str, how: str) -> None:
    """A continuous column holds finite numbers only: an infinite value (``inf``, ``Infinity``,
    read as a number or as text) or a NaN that is not a missing value would make every mean,
    distance and range of the column meaningless. Checked by DuckDB over the distinct values."""
    t = vals.type
    if not (pa.types.is_floating(t) or _is_text(t)):
        return  # integers, decimals and booleans are always finite
    probe = pa.table({"v": vals.v, "n": vals.n, "first": vals.first})
    bad = "NOT isfinite(w)"
    row = ctx.sql(f"SELECT coalesce(sum(n) FILTER (WHERE {bad}), 0) AS bad, min(first) FILTER (WHERE {bad}) AS first, "
                  f"arg_min(v, first) FILTER (WHERE {bad}) AS value "
                  "FROM (SELECT TRY_CAST(v AS DOUBLE) AS w, v, n, first FROM probe WHERE v IS NOT NULL) "
                  "WHERE w IS NOT NULL", probe=probe).to_pylist()[0]
    if row["bad"]:
        value = row["value"]
        shown = repr(value) if isinstance(value, str) else str(value)
        raise InputError(f"column {c!r} is {how} continuous but {int(row['bad'])} record(s) hold a number that is not "
                         f"finite, the first in record {int(row['first']) + 1} ({shown}); fix the value, or list it "
                         "under missing_values" + ("" if _is_text(t) else f" (reading the column as text: types: "
                                                   f"{{{c}: VARCHAR}} in the source)"), where=where)


def _weight_cast(vals: "_Values", c: str, ctx: StepContext, where: str) -> str | None:
    """Check a weight column (role ``weight``): numbers, each finite and > 0, checked by DuckDB
    over the column's distinct values (missing values are dropped or refused before). Return
    the SQL type its values are cast to: DOUBLE for text holding numbers, None for numbers."""
    t = vals.type
    text = _is_text(t)
    if not (text or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        raise InputError(f"weight column {c!r} has type {t}, which is not numeric; a sampling weight is a "
                         "number > 0", where=where)
    if text:
        _, bad, first, value = _non_numbers(vals, ctx)
        if bad:
            raise InputError(f"weight column {c!r} must hold numbers, but record {first + 1} has the value "
                             f"{value!r}; fix the value or list it under missing_values", where=where)
    probe = pa.table({"v": vals.v, "n": vals.n, "first": vals.first})
    bad_weight = "NOT (isfinite(w) AND w > 0)"
    row = ctx.sql(f"SELECT coalesce(sum(n) FILTER (WHERE {bad_weight}), 0) AS bad, "
                  f"min(first) FILTER (WHERE {bad_weight}) AS first, "
                  f"arg_min(v, first) FILTER (WHERE {bad_weight}) AS value "
                  "FROM (SELECT TRY_CAST(v AS DOUBLE) AS w, v, n, first FROM probe WHERE v IS NOT NULL)",
                  probe=probe).to_pylist()[0]
    if row["bad"]:
        value = row["value"]
        shown = repr(value) if isinstance(value, str) else str(value)  # 0.0, -4, inf; text quoted
        raise InputError(f"weight column {c!r} has {int(row['bad'])} record(s) whose weight is not a finite number "
                         f"> 0, the first in record {int(row['first']) + 1} ({shown}); a sampling weight is "
                         "the number of population units a record stands for", where=where)
    return "DOUBLE" if text else None


def _check_mostly_numeric(vals: "_Values", c: str, ctx: StepContext, where: str) -> None:
    """A text column whose values are all numbers but a few is almost surely a numeric
    column with a typo: say so instead of silently typing it nominal."""
    ok, bad, first, value = _non_numbers(vals, ctx)
    if bad and ok >= 0.99 * (ok + bad):
        raise InputError(f"column {c!r} holds numbers except {bad} value(s), the first in record {first + 1}: "
                         f"{value!r}; fix the value, list it under missing_values, or declare the column's type "
                         f"explicitly ({{{c}: nominal}} or {{{c}: continuous}})", where=where)


def _as_codes(vals: "_Values", c: str, where: str) -> bool:
    """Check a semantic column's codes (one length); True if they must be cast to text."""
    col = vals.present()
    cast = not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type))
    if cast:
        col = col.cast(pa.string())
    if not len(col):
        return cast
    lengths = pc.utf8_length(col).to_numpy(zero_copy_only=False)
    if lengths.min() != lengths.max():
        n = vals.n[np.asarray(pc.is_valid(vals.v).to_numpy(zero_copy_only=False), dtype=bool)]
        uniq = np.unique(lengths)
        weight = np.array([n[lengths == u].sum() for u in uniq])
        common = int(uniq[int(np.argmax(weight))])
        odd = col[int(np.flatnonzero(lengths != common)[0])].as_py()
        raise InputError(f"semantic column {c!r} needs codes of one length; most have {common} symbols but "
                         f"{odd!r} has {len(odd)} (read the column as text, e.g. types: {{{c}: VARCHAR}}, "
                         "to keep leading zeros)", where=where)
    return cast


def _check_order(vals: "_Values", c: str, order: list, where: str) -> None:
    order_set = pa.array([str(v) for v in order], type=pa.string())
    values = pc.unique(vals.v.cast(pa.string()))
    missing = pc.filter(values, pc.invert(pc.is_in(values, value_set=order_set)))
    if len(missing):
        raise InputError(f"ordinal column {c!r}: value {missing[0].as_py()!r} is not in its 'order' "
                         f"({', '.join(map(str, order))})", where=where)

