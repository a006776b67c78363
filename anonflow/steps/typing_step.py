"""The built-in steps, the engine's own glue around the plugins (:data:`BUILTINS`).

* ``typing`` (:class:`TypingStep`): roles and types of the columns, the missing-value policy
  (:data:`MISSING_CATEGORY`; common spellings of "missing", :data:`MISSING_SPELLINGS`, must
  be declared), type inference (:func:`infer_type`), the sampling-weight column (role
  ``weight``: numeric, finite and positive, :func:`_weight_cast`), and the refusals that keep
  a table publishable: undeclared columns that look like identifiers, column names a
  spreadsheet would run as formulas;
* ``filter`` and ``sample``: keep the records an SQL condition selects (sandboxed, see
  :func:`anonflow.store.condition_mask`), or a seeded random sample;
* ``hierarchy``: build generalization hierarchies with the hierarchy-builder plugins and
  attach them to the table;
* ``evaluate``: run metric plugins and privacy checks, with thresholds that fail the run;
* ``publish``: hand the table, ordered by class (:func:`for_publication`), to a publisher
  plugin.

Each declares its parameters like a plugin does, checks what it can before anything runs
(:meth:`Builtin.check_params`, :meth:`Builtin.validate`), and then runs on Arrow tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .api import Output, StepContext
from .errors import InputError, RunError, WorkflowError
from .grading import Grading, check_grading_against, load_grading
from .hierarchy import Hierarchy
from .params import Param, ParamError, suggest, validate_params
from .schema import CLASS, FRAGMENT, ROW, TYPES, Attribute, Typing
from .store import ident
from .table import TypedTable
from .workflow_schema import COLUMN_LIST, METRICS, ROLE_COLUMNS, THRESHOLDS

MISSING_CATEGORY = "?"


@dataclass(frozen=True)
class StaticInput:
    """What planning knows about an input table before anything runs."""

    name: str
    columns: tuple[str, ...] | None  # None: unknown until run time
    typed: bool


class Builtin:
    uses: str = ""
    kind: str = ""
    produces: str = "table"  # table | metrics | files
    min_inputs: int = 1
    max_inputs: int = 1
    params: tuple[Param, ...] = ()
    description: str = ""

    def check_params(self, given: Mapping[str, Any], registry: Any, where: str,
                     base_dir: Path | None = None) -> dict[str, Any]:
        """Validate the step's ``with:`` block; return it with defaults filled in (and files
        it names resolved to their content, so fingerprints see a changed file)."""
        try:
            return validate_params(self.params, given)
        except ParamError as exc:
            raise WorkflowError(str(exc), where=where) from None

    def validate(self, params: dict[str, Any], inputs: Sequence[StaticInput], registry: Any,
                 where: str) -> tuple[str, ...] | None:
        """Static checks; return the output columns if known."""
        return None


# -- typing ----------------------------------------------------------------------------

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


class TypingStep(Builtin):
    uses = kind = "typing"
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


# -- filter and sample -----------------------------------------------------------------


class FilterStep(Builtin):
    uses = kind = "filter"
    description = "Keep the records matching an SQL condition (DuckDB dialect); the rest are counted."
    params = (
        Param("where", "str", help="(`filter`) SQL boolean expression over the columns; `_row` is the source "
                                   "position"),
    )

    def validate(self, params, inputs, registry, where):
        from .store import check_condition

        check_condition(params["where"], where=where)
        return inputs[0].columns

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext, where: str) -> tuple[TypedTable, dict]:
        # user SQL runs sandboxed (anonflow.store.condition_mask): it sees only the input records, reads no file
        from .store import condition_mask

        # the condition may read any column, and aggregate over all records (a subquery on
        # ``input``), so the sandbox sees the whole table; only the mask comes back
        ordered = table.data.sort_by(ROW)
        mask = condition_mask(params["where"], ordered, where=where)
        kept = int(pc.sum(mask).as_py() or 0)
        removed = table.num_rows - kept
        ctx.note(f"kept {kept} of {table.num_rows} records ({removed} removed by {params['where']!r})")
        summary = {"records_in": table.num_rows, "records_out": kept, "removed": removed}
        if table.stored is None or ctx.derive is None:
            return table.replace(data=ordered.filter(mask).cast(table.data.schema)), summary
        # in the store: the records kept are written by DuckDB (the mask joined by position)
        out = ctx.derive("SELECT t.* FROM t POSITIONAL JOIN m WHERE m._af_keep", t=TypedTable(None, stored=table.stored),
                         m=pa.table({"_af_keep": mask}))
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored), summary


class SampleStep(Builtin):
    uses = kind = "sample"
    description = "A seeded random sample of records (without replacement), in their original order."
    params = (
        Param("n", "int", default=None, nullable=True, min=1,
              help="(`sample`) number of records to draw without replacement"),
        Param("fraction", "float", default=None, nullable=True, min=0.0, max=1.0,
              help="(`sample`) or the fraction of records; give exactly one of `n` and `fraction`"),
    )

    def validate(self, params, inputs, registry, where):
        if (params["n"] is None) == (params["fraction"] is None):
            raise WorkflowError("give exactly one of 'n' and 'fraction'", where=where)
        return inputs[0].columns

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext, where: str) -> tuple[TypedTable, dict]:
        n = params["n"] if params["n"] is not None else int(round(params["fraction"] * table.num_rows))
        if n > table.num_rows:
            raise InputError(f"parameter 'n' = {n} is larger than the table ({table.num_rows} records)", where=where)
        chosen = np.sort(ctx.rng.choice(table.num_rows, size=n, replace=False))
        ctx.note(f"sampled {n} of {table.num_rows} records")
        summary = {"records_in": table.num_rows, "records_out": n}
        if table.loaded or ctx.derive is None:
            return table.replace(data=table.data.take(pa.array(chosen))), summary
        # in the store: the chosen positions as a mask joined by position (order kept)
        keep = np.zeros(table.num_rows, dtype=bool)
        keep[chosen] = True
        out = ctx.derive("SELECT t.* FROM t POSITIONAL JOIN m WHERE m._af_keep", t=table,
                         m=pa.table({"_af_keep": keep}))
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored), summary


# -- partition -------------------------------------------------------------------------

#: the default largest fragment of the ``partition`` step (see anonflow/fragments.py): on Adult
#: the smallest size at which maasae's, l-clustering's and the GCAs' paper metrics move by at
#: most 2 % (relative) against a whole-table run, and at which maasae and l-clustering still run
#: a million records in minutes on two cores; the MDAV family's SSE-IL moves more at any size
#: below the whole table (docs/results.md, section 6)
DEFAULT_MAX_RECORDS = 20_000


class PartitionStep(Builtin):
    uses = kind = "partition"
    description = ("Cut a typed table into fragments (strata, then recursive median cuts on the QIs) so that each "
                   "algorithm step fed by it runs once per fragment, in parallel on an executor.")
    params = (
        Param("max_records", "int", default=DEFAULT_MAX_RECORDS, min=2, nullable=True,
              help="cut until every fragment holds at most this many records; null: strata only"),
        Param("by", "list", default=[], shape=COLUMN_LIST,
              help="strata: columns each combination of whose values is cut on its own"),
        Param("columns", "list", default=None, nullable=True, shape=COLUMN_LIST,
              help="the columns to cut on (null: the quasi-identifiers, less the strata)"),
    )

    def check_params(self, given, registry, where, base_dir=None):
        params = super().check_params(given, registry, where, base_dir)
        for key in ("by", "columns"):
            value = params[key]
            if value is None:
                continue
            if not all(isinstance(c, str) and c for c in value):
                raise WorkflowError(f"parameter {key!r}: expected a list of column names, got {value!r}", where=where)
            if len(set(value)) != len(value):
                raise WorkflowError(f"parameter {key!r} names a column twice", where=where)
            reserved = [c for c in value if c in (ROW, CLASS, FRAGMENT)]
            if reserved:
                raise WorkflowError(f"parameter {key!r}: {reserved[0]!r} is anonflow's own column", where=where)
        if params["max_records"] is None and not params["by"]:
            raise WorkflowError("give 'max_records' or 'by' (or both): a partition needs something to cut by",
                                where=where)
        return params

    def validate(self, params, inputs, registry, where):
        cols = inputs[0].columns
        if cols is not None:
            for key in ("by", "columns"):
                for c in params[key] or ():
                    if c not in cols:
                        raise WorkflowError(f"parameter {key!r}: no column {c!r} in the input "
                                            f"(columns: {', '.join(x for x in cols if x != ROW)})", where=where)
            if FRAGMENT in cols:
                raise WorkflowError("the input is partitioned already; partition the typed table once",
                                    where=where)
            if CLASS in cols:
                raise WorkflowError(f"input {inputs[0].name!r} is an algorithm's output; partition the typed table "
                                    "the algorithm reads instead", where=where)
        if not inputs[0].typed:
            raise WorkflowError(f"partition needs a typed table: add a typing step before it "
                                f"(input {inputs[0].name!r})", where=where)
        return None if cols is None else (*cols, FRAGMENT)

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext,
            where: str) -> tuple[TypedTable, dict[str, Any]]:
        from .fragments import partition  # the cutting lives with the fragment grouping it serves

        return partition(table, params, ctx, where)


# -- hierarchy -------------------------------------------------------------------------


class HierarchyStep(Builtin):
    uses = kind = "hierarchy"
    description = "Build generalization hierarchies for columns and attach them to the table (SPEC section 2)."
    params = ()  # one entry per column: {column: {builder: parameters}}

    def check_params(self, given, registry, where, base_dir=None):
        if not given:
            raise WorkflowError("name at least one column: {column: {builder: parameters}}, e.g. "
                                "age: {interval: [5, 10, 20]}", where=where)
        out: dict[str, Any] = {}
        for column, spec in given.items():
            cwhere = f"{where}: column {column!r}"
            if not isinstance(spec, Mapping) or len(spec) != 1:
                raise WorkflowError("expected {builder: parameters}, e.g. {interval: [5, 10, 20]} or "
                                    f"{{arx: hierarchy.csv}}; builders: {', '.join(registry.names('hierarchy'))}",
                                    where=cwhere)
            (name, bparams), = spec.items()
            reg = registry.get("hierarchy", str(name), where=cwhere)
            builder = reg.obj
            declared = {p.name: p for p in builder.params}
            primary = declared.get(builder.primary or "")
            if isinstance(bparams, Mapping) and primary is not None and primary.kind in ("dict", "any") \
                    and not set(bparams) <= set(declared):
                bparams = {builder.primary: bparams}  # {taxonomy: {Europe: [...]}} is the tree itself
            if not isinstance(bparams, Mapping):
                if builder.primary is None:
                    raise WorkflowError(f"hierarchy builder {reg.name!r} takes a mapping of parameters", where=cwhere)
                bparams = {builder.primary: bparams}
            try:
                validated = validate_params(builder.params, bparams)
            except ParamError as exc:
                raise WorkflowError(f"hierarchy builder {reg.name!r}: {exc}", where=cwhere) from None
            files = {}
            for key in builder.files:
                if validated.get(key) is None:
                    continue
                path = ((base_dir or Path.cwd()) / str(validated[key])).resolve()
                if not path.is_file():
                    raise WorkflowError(f"hierarchy file not found: {path}", where=cwhere)
                validated[key] = str(path)
                files[key] = _sha256(path)
            out[str(column)] = {"builder": reg.name, "version": reg.version, "params": validated, "files": files}
        return out

    def validate(self, params, inputs, registry, where):
        if not inputs[0].typed:
            raise WorkflowError(f"input {inputs[0].name!r} is not typed; build hierarchies on a typing step's "
                                "output", where=where)
        cols = inputs[0].columns
        if cols is not None:
            for column in params:
                if column not in cols:
                    raise WorkflowError(f"column {column!r} is not in input {inputs[0].name!r}"
                                        f"{suggest(column, cols)}", where=where)
        return cols

    def run(self, table: TypedTable, params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> tuple[TypedTable, dict]:
        hierarchies = dict(table.hierarchies)
        summary: dict[str, Any] = {"hierarchies": {}}
        for column, spec in params.items():
            reg = registry.get("hierarchy", spec["builder"], where=where)
            cwhere = f"{where}: column {column!r}"
            try:  # the builder's own check, with the table and the column it is for (plan runs it too)
                reg.obj.check(spec["params"], table=table, column=column)
            except InputError as exc:
                raise InputError(f"hierarchy builder {reg.name!r}: {exc.message}", where=cwhere) from None
            # the column's distinct values in order of first appearance (DuckDB groups them)
            values = ctx.sql(f"SELECT {ident(column)} AS v FROM t WHERE {ident(column)} IS NOT NULL GROUP BY 1 "
                             f"ORDER BY min({ident(ROW)})", t=table).column("v").combine_chunks()
            origin = spec["params"].get("file") or reg.name
            built = reg.obj.build(column, values, spec["params"], ctx)
            h = Hierarchy.from_levels(column, [built.level(i) for i in range(built.height + 1)], builder=reg.name)
            h.validate(cwhere, str(origin))
            h.check_covers(values, cwhere, str(origin))
            hierarchies[column] = h
            summary["hierarchies"][column] = h.describe()
            ctx.note(f"{column}: {reg.name} hierarchy with levels 0..{h.height} "
                     f"({' / '.join(map(str, h.describe()['distinct_per_level']))} distinct values)")
        return table.replace(hierarchies=hierarchies), summary


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- evaluate --------------------------------------------------------------------------


def metric_entries(value: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """``[a, {b: {k: 5}}]`` or ``{a: {}, b: {k: 5}}`` -> ``[(a, {}), (b, {k: 5})]``."""
    if isinstance(value, Mapping):
        value = [{k: v} for k, v in value.items()]
    if isinstance(value, str):
        value = [value]
    out = []
    for item in value or []:
        if isinstance(item, str):
            out.append((item, {}))
        elif isinstance(item, Mapping) and len(item) == 1:
            (name, p), = item.items()
            if p is not None and not isinstance(p, Mapping):
                raise WorkflowError(f"metric {name!r}: parameters must be a mapping, got {p!r}", where=where)
            out.append((str(name), dict(p or {})))
        else:
            raise WorkflowError(f"'metrics' entries must be a name or {{name: {{param: value}}}}, got {item!r}",
                                where=where)
    if not out:
        raise WorkflowError("'metrics' must name at least one metric", where=where)
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise WorkflowError("a metric is listed twice", where=where)
    return out


class EvaluateStep(Builtin):
    uses = kind = "evaluate"
    produces = "metrics"
    max_inputs = 2
    description = "Compute metrics and privacy checks on [original, anonymized]; optional thresholds fail the run."
    params = (
        Param("metrics", "any", shape=METRICS, help="metric names, or `{name: {param: value}}`"),
        Param("thresholds", "dict", default={}, shape=THRESHOLDS,
              help="value name -> `{min: x}` and/or `{max: y}`; a miss fails the run (exit 1) after the values are "
                   "stored"),
        Param("enforce", "bool", default=True, help="fail the run when a privacy check does not hold"),
        Param("risk_before", "bool", default=False,
              help="with `[original, anonymized]`: also measure every risk metric (category `risk`) on the "
                   "original, as if it were published unchanged; its values are `<metric>.before` and "
                   "`<metric>.before.<detail>`, and thresholds may name them"),
    )

    def validate(self, params, inputs, registry, where):
        if params.get("risk_before") and len(inputs) < 2:
            raise WorkflowError("risk_before measures the original too: give two inputs, [original, anonymized]",
                                where=where)
        for name, mparams in metric_entries(params["metrics"], where):
            reg = registry.get("metric", name, where=where)
            if reg.obj.requires_original and len(inputs) < 2:
                raise WorkflowError(f"metric {name!r} compares with the original table: give two inputs, "
                                    "[original, anonymized]", where=where)
            try:
                validate_params(reg.obj.params, mparams)
            except ParamError as exc:
                raise WorkflowError(f"metric {name!r}: {exc}", where=where) from None
        names = [n for n, _ in metric_entries(params["metrics"], where)]
        for key, bound in params["thresholds"].items():
            if not any(key == n or key.startswith(n + ".") for n in names):
                raise WorkflowError(f"threshold {key!r} names no value of the listed metrics "
                                    f"({', '.join(names)}){suggest(key, names)}", where=where)
            if not isinstance(bound, Mapping) or not bound or set(bound) - {"min", "max"} or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in bound.values()):
                raise WorkflowError(f"threshold {key!r}: expected {{min: number}} and/or {{max: number}}, got {bound!r}",
                                    where=where)
        for inp in inputs:
            if not inp.typed:
                raise WorkflowError(f"input {inp.name!r} is not typed; evaluate a typing or algorithm step's output",
                                    where=where)
        return None

    def run(self, tables: Sequence[TypedTable], params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> tuple[dict[str, float], list[str]]:
        scratch: list[TypedTable] = []
        try:
            return self._evaluate(tables, params, registry, ctx, where, scratch)
        finally:
            for table in scratch:
                ctx.discard(table)

    def _evaluate(self, tables: Sequence[TypedTable], params: Mapping[str, Any], registry: Any, ctx: StepContext,
                  where: str, scratch: list[TypedTable]) -> tuple[dict[str, float], list[str]]:
        original, anonymized = (tables[0], tables[1]) if len(tables) == 2 else (None, tables[0])
        unpublished = original  # every original record, before suppressed ones are set apart
        if original is not None and anonymized.num_rows < original.num_rows and ROW in anonymized.columns:
            # records suppressed by the algorithm: compare the published ones with their originals
            if original.loaded or anonymized.loaded or ctx.derive is None:
                kept = pc.is_in(original.column(ROW), value_set=anonymized.column(ROW).combine_chunks())
                ctx.suppressed = original.num_rows - int(pc.sum(kept).as_py() or 0)
                original = original.replace(data=original.data.filter(kept))
            else:  # in the store
                r = ident(ROW)
                kept_table = ctx.derive(f"SELECT * FROM original WHERE {r} IN (SELECT {r} FROM anonymized)",
                                        ordered=False, original=original, anonymized=anonymized)
                ctx.suppressed = original.num_rows - kept_table.num_rows
                original = kept_table.replace(typing=original.typing, claims=original.claims,
                                              hierarchies=original.hierarchies)
                scratch.append(kept_table)
        values: dict[str, float] = {}
        failures: list[str] = []
        for name, given in metric_entries(params["metrics"], where):
            reg = registry.get("metric", name, where=where)
            mparams = validate_params(reg.obj.params, given)
            if original is not None:
                reg.obj.check(mparams, original=original, anonymized=anonymized)
            else:
                reg.obj.check(mparams, anonymized=anonymized)
            result = self._compute(reg, name, original, anonymized, mparams, ctx, where)
            values.update(self._values(name, result, where))
            if params.get("risk_before") and reg.obj.category == "risk" and unpublished is not None:
                # the same measure on the original, as if it were published unchanged
                before = self._compute(reg, name, None, unpublished, mparams, ctx, where)
                values.update(self._values(name, {name + ".before" + k[len(name):]: v for k, v in before.items()},
                                           where))
            holds = result.get(f"{name}.holds")
            if params["enforce"] and reg.obj.category == "privacy" and holds is not None and not holds:
                failures.append(f"privacy check {name!r} does not hold ({_fmt_detail(name, result)})")
        for key, bound in params["thresholds"].items():
            if key not in values:
                raise WorkflowError(f"threshold {key!r}: the metrics returned no such value; they returned "
                                    f"{', '.join(values)}", where=where)
            v = values[key]
            if "min" in bound and not (v >= bound["min"]):
                failures.append(f"{key} = {v:g} is below the threshold min {bound['min']:g}")
            if "max" in bound and not (v <= bound["max"]):
                failures.append(f"{key} = {v:g} is above the threshold max {bound['max']:g}")
        return values, failures


    @staticmethod
    def _compute(reg: Any, name: str, original: TypedTable | None, anonymized: TypedTable,
                 mparams: Mapping[str, Any], ctx: StepContext, where: str) -> Mapping[str, Any]:
        try:
            return reg.obj.compute(original, anonymized, mparams, ctx)
        except (InputError, RunError):
            raise
        except Exception as exc:
            raise RunError(f"metric {name!r} ({reg.distribution} {reg.version}) failed: "
                           f"{type(exc).__name__}: {exc}", where=where) from exc

    @staticmethod
    def _values(name: str, result: Mapping[str, Any], where: str) -> dict[str, float]:
        """A metric's values as numbers, each named ``name`` or ``name.<detail>``."""
        values: dict[str, float] = {}
        for key, value in result.items():
            if key != name and not key.startswith(name + "."):
                raise RunError(f"metric {name!r} returned the value {key!r}; names must start with {name!r}",
                               where=where)
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise RunError(f"metric {name!r} returned a non-number for {key!r}: {value!r}",
                               where=where) from None
        return values


def _fmt_detail(name: str, result: Mapping[str, Any]) -> str:
    parts = [f"{k} = {float(v):g}" for k, v in result.items() if k != f"{name}.holds"]
    return ", ".join(parts)


# -- publish ---------------------------------------------------------------------------


class PublishStep(Builtin):
    uses = kind = "publish"
    produces = "files"
    description = "Write a table with a publisher plugin (records ordered by class, row ids dropped)."
    params = (
        Param("publisher", "str", help="a publisher plugin: `csv`, `parquet`, `lossy-join`, `postgres` (tables in a "
                                       "PostgreSQL database, [below](#the-postgres-publisher)), `release` (an "
                                       "audited release directory, [releases.md](releases.md)), or a third party's"),
        Param("row_id", "bool", default=False, help="keep `_row` (the source position) in the output; off because it "
                                                     "can link records back; a release refuses it"),
    )

    def split(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        own = {k: v for k, v in params.items() if k in ("publisher", "row_id")}
        rest = {k: v for k, v in params.items() if k not in own}
        return own, rest

    def check_params(self, given, registry, where, base_dir=None):
        from .outputs import check_output_path

        own, reg, rest = self.validate_all(given, registry, where)
        if own["row_id"] and not getattr(reg.obj, "accepts_row_id", True):
            raise WorkflowError(f"publisher {reg.name!r} does not publish _row (row_id: true): the source position "
                                "links each published record back to its original", where=where)
        for key in getattr(reg.obj, "outputs", ("path",)):
            if rest.get(key) is not None:
                check_output_path(rest[key], where=where, param=key)
        try:  # what the publisher can tell without the table (paths, names, a signing key) fails now
            reg.obj.check(rest, workflow_dir=base_dir)
        except InputError as exc:
            raise WorkflowError(exc.message, where=where) from None
        return {**own, **rest}

    def validate_all(self, params: Mapping[str, Any], registry: Any, where: str) -> tuple[dict, Any, dict]:
        own, rest = self.split(params)
        try:
            own = validate_params(self.params, own)
        except ParamError as exc:
            raise WorkflowError(str(exc), where=where) from None
        reg = registry.get("publisher", own["publisher"], where=where)
        try:
            rest = validate_params(reg.obj.params, rest)
        except ParamError as exc:
            raise WorkflowError(f"publisher {reg.name!r}: {exc}", where=where) from None
        return own, reg, rest

    def validate(self, params, inputs, registry, where):
        if not inputs[0].typed:
            raise WorkflowError(f"input {inputs[0].name!r} is not typed; publish a typing or algorithm step's output",
                                where=where)
        return None

    def run(self, table: TypedTable, params: Mapping[str, Any], registry: Any, ctx: StepContext,
            where: str) -> list[Output]:
        own, reg, rest = self.validate_all(params, registry, where)
        reg.obj.check(rest, table=table)
        return reg.obj.publish(for_publication(table, keep_row=own["row_id"], ctx=ctx), rest, ctx)


def for_publication(table: TypedTable, keep_row: bool = False, ctx: StepContext | None = None) -> TypedTable:
    """Order records by class, then by their published values (never by source position,
    which could link them back), and drop ``_row`` unless asked to keep it. A stored table
    stays in the store: the ordering is a view the publisher reads (or copies) from."""
    cols = table.columns
    if not table.loaded and ctx is not None and ctx.relation is not None:
        keys = ([CLASS] if CLASS in cols else []) + [c for c in cols if c not in (CLASS, ROW, FRAGMENT)]
        nested = {f.name for f in table.schema if pa.types.is_nested(f.type)}
        order = ", ".join(f"{ident(k)} ASC NULLS LAST" for k in [*keys, ROW] if k not in nested)
        shown = ", ".join(ident(c) for c in cols if (keep_row or c != ROW) and c != FRAGMENT)
        view = ctx.relation(f"SELECT {shown} FROM t ORDER BY {order}", rows=table.num_rows, t=table)
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=view.stored)
    data = table.data
    keys = ([CLASS] if CLASS in data.column_names else []) + [c for c in data.column_names
                                                              if c not in (CLASS, ROW, FRAGMENT)]
    sortable = [k for k in keys if not pa.types.is_nested(data.column(k).type)] + [ROW]
    data = data.sort_by([(k, "ascending") for k in sortable])
    if not keep_row:
        data = data.drop_columns([ROW])
    if FRAGMENT in data.column_names:  # the engine's, not the data's
        data = data.drop_columns([FRAGMENT])
    return table.replace(data=data)


BUILTINS: dict[str, Builtin] = {b.uses: b for b in (TypingStep(), FilterStep(), SampleStep(), HierarchyStep(),
                                                     PartitionStep(), EvaluateStep(), PublishStep())}

