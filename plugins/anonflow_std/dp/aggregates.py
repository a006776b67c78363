"""``dp-aggregates``: marginals (contingency tables), sums and means of a table, released with
noise from OpenDP's measurements.

The exact figures come from DuckDB (one ``GROUP BY`` per marginal, one aggregate per sum or
mean); only the noise is added in Python, by OpenDP's discrete Laplace (ε-DP) or discrete
Gaussian (ρ-zCDP) measurement on integers, with the noise scale OpenDP derives
(``binary_search_param``) from the sensitivity stated here and the query's share of the budget.

Neighbouring tables: one record of the publish step's input table added or removed. Then a
marginal's vector of counts (every cell of the cross product of the attributes' declared
domains, zero cells included) changes by 1 in one cell: L1 and L2 sensitivity 1. A sum of a
column clamped to ``[lo, hi]`` and rounded to the grid ``resolution`` changes by at most
``max(|lo|, |hi|) / resolution`` grid units; a mean is a noisy sum over a noisy count (the
count of the column's non-missing values, sensitivity 1), each given half the mean's share.

Every noised number is an integer (counts, sums in grid units): OpenDP's ``contrib`` feature
is all that is needed, never ``floating-point``. The released cells come from the declared
domains only, never from the data's distinct values.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from anonflow.api import (InputError, Output, Param, Publisher, StepContext, TypedTable, atomic_write, sql_ident,
                          value_keys)

from .. import __version__

#: what a run without the ``dp`` extra is told
INSTALL = "dp-aggregates needs OpenDP: pip install 'anonflow[dp]'"
#: hierarchy builders whose leaves are declared by the workflow (a file, an inline tree), not
#: taken from the data's values (``interval`` and ``mask`` build on the values they are given)
DECLARED_BUILDERS = ("arx", "taxonomy")
#: the neighbouring relation every figure here is stated for
NEIGHBOURS = "add or remove one record of the input table"
MECHANISMS = {"laplace": ("discrete Laplace", "pure", "epsilon", "l1"),
              "gaussian": ("discrete Gaussian", "zcdp", "rho", "l2")}
#: text cells that a spreadsheet would read as a formula (as the csv publisher escapes them)
FORMULA_START = re.compile(r"^[=+\-@\t\r]")
I64 = 2 ** 62  # a sum in grid units must stay well inside OpenDP's i64


def opendp() -> Any:
    """``opendp.prelude`` with the ``contrib`` feature on; one line naming the extra when missing.

    ``contrib``: OpenDP keeps every mechanism whose proof is not yet vetted behind it, the
    discrete Laplace and Gaussian on integers included. ``floating-point`` is never turned on:
    no noise is added to a float."""
    try:
        import opendp.prelude as dp
    except ImportError:
        raise InputError(INSTALL) from None
    dp.enable_features("contrib")
    return dp


@dataclass
class Query:
    """One released file's query: ``kind`` is marginal, sum or mean; ``share`` its part of the budget."""

    kind: str
    columns: tuple[str, ...]
    share: float
    file: str = ""
    bounds: tuple[float, float] | None = None
    resolution: float | None = None
    record: dict[str, Any] = field(default_factory=dict)


def _name_part(column: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", column).strip("._") or "column"


def _marginals(value: Any) -> list[tuple[str, ...]]:
    out = []
    for m in value or []:
        cols = (m,) if isinstance(m, str) else tuple(m) if isinstance(m, list) else None
        if not cols or not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(cols):
            raise InputError(f"dp-aggregates: 'marginals' lists column names or lists of distinct column names, "
                             f"got {m!r}")
        out.append(cols)
    if len({frozenset(c) for c in out}) != len(out):
        raise InputError("dp-aggregates: 'marginals' lists the same set of columns twice")
    return out


def _bounds(params: Mapping[str, Any], column: str) -> tuple[float, float]:
    b = (params.get("bounds") or {}).get(column)
    if b is None:
        raise InputError(f"dp-aggregates: column {column!r} is summed or averaged but has no bounds: give "
                         f"bounds: {{{column}: [lo, hi]}} (declared, not taken from the data)")
    if (not isinstance(b, list) or len(b) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         and math.isfinite(v) for v in b) or not b[0] < b[1]):
        raise InputError(f"dp-aggregates: bounds of {column!r} must be [lo, hi] with finite lo < hi, got {b!r}")
    return float(b[0]), float(b[1])


def plan(params: Mapping[str, Any]) -> list[Query]:
    """The queries of ``params`` in release order (marginals, sums, means), each with its share
    of the budget (``split`` weights, or equal parts); checks what can be told without the table."""
    mech = params.get("mechanism", "laplace")
    key = MECHANISMS[mech][2]
    budget = params.get(key)
    other = "rho" if key == "epsilon" else "epsilon"
    if budget is None:
        raise InputError(f"dp-aggregates: mechanism {mech} needs '{key}' (its privacy budget, > 0)")
    if params.get(other) is not None:
        raise InputError(f"dp-aggregates: mechanism {mech} spends '{key}'; '{other}' is for the "
                         f"{'gaussian' if other == 'rho' else 'laplace'} mechanism")
    specs: list[tuple[str, tuple[str, ...]]] = [("marginal", m) for m in _marginals(params.get("marginals"))]
    for kind in ("sum", "mean"):
        cols = params.get(kind + "s") or []
        if len(set(cols)) != len(cols):
            raise InputError(f"dp-aggregates: '{kind}s' lists a column twice")
        specs += [(kind, (c,)) for c in cols]
    if not specs:
        raise InputError("dp-aggregates: nothing to release: give 'marginals', 'sums' or 'means'")
    split = params.get("split")
    if split is not None and (len(split) != len(specs) or any(w <= 0 for w in split)):
        raise InputError(f"dp-aggregates: 'split' gives one positive weight per query ({len(specs)}: marginals, "
                         f"then sums, then means), got {split!r}")
    weights = [float(w) for w in split] if split is not None else [1.0] * len(specs)
    queries = []
    for (kind, cols), w in zip(specs, weights):
        q = Query(kind, cols, float(budget) * w / sum(weights))
        if kind == "marginal":
            q.file = "marginal_" + "_x_".join(_name_part(c) for c in cols) + ".csv"
        else:
            q.bounds = _bounds(params, cols[0])
            res = (params.get("resolution") or {}).get(cols[0])
            if res is not None and (isinstance(res, bool) or not isinstance(res, (int, float)) or not res > 0
                                    or not math.isfinite(res)):
                raise InputError(f"dp-aggregates: resolution of {cols[0]!r} must be a number > 0, got {res!r}")
            q.resolution = float(res) if res is not None else None
        queries.append(q)
    names = [q.file for q in queries if q.file]
    if len(set(names)) != len(names):
        raise InputError("dp-aggregates: two marginals would be written to the same file name; rename a column")
    return queries


def domain_of(table: TypedTable, column: str, params: Mapping[str, Any]) -> list[str]:
    """The declared categories of ``column`` as text: the ``domain`` parameter, else an ordinal's
    ``order``, else the leaves of a hierarchy read from a file or written inline. Never the data's
    distinct values: which values occur would then show in which cells are released."""
    given = (params.get("domain") or {}).get(column)
    if given is not None:
        if not isinstance(given, list) or not given or any(isinstance(v, (list, dict)) or v is None for v in given):
            raise InputError(f"dp-aggregates: domain of {column!r} must be a non-empty list of values, got {given!r}")
        values = [str(v) for v in given]
    elif column in table.typing and table.typing.get(column).order:
        values = list(table.typing.get(column).order)
    elif column in table.hierarchies and getattr(table.hierarchies[column], "builder", "") in DECLARED_BUILDERS:
        values = pc.unique(table.hierarchies[column].level(0)).to_pylist()
    else:
        raise InputError(f"dp-aggregates: column {column!r} has no data-independent domain: give domain: "
                         f"{{{column}: [...]}}, type it ordinal with its order, or give it an arx or taxonomy "
                         "hierarchy (its distinct values in the data would leak which values occur)")
    if len(set(values)) != len(values):
        raise InputError(f"dp-aggregates: the domain of {column!r} lists a value twice")
    return values


def exact_marginal(table: TypedTable, columns: tuple[str, ...], domains: list[list[str]],
                   ctx: StepContext) -> np.ndarray:
    """The exact count of every cell of the cross product of ``domains`` (C order: the last
    column varies fastest), zero cells included, from one DuckDB ``GROUP BY``. A record whose
    value lies outside its column's domain (or is missing) fails the step: nothing is released."""
    cols = ", ".join(sql_ident(c) for c in columns)
    grouped = ctx.sql(f"SELECT {cols}, count(*)::BIGINT AS __af_n FROM t GROUP BY ALL", t=table)
    shape = tuple(len(d) for d in domains)
    flat = np.zeros(len(grouped), dtype=np.int64)
    for c, dom, size in zip(columns, domains, shape):
        idx = pc.index_in(value_keys(grouped.column(c)), value_set=pa.array(dom, pa.string()))
        if idx.null_count:
            outside = int(pc.sum(pc.filter(grouped.column("__af_n"), pc.is_null(idx))).as_py())
            raise InputError(f"dp-aggregates: {outside} record(s) hold a value of {c!r} outside its declared domain "
                             f"(or none): add it to domain: {{{c}: [...]}} (nothing was released)")
        flat = flat * size + idx.to_numpy(zero_copy_only=False).astype(np.int64)
    counts = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    np.add.at(counts, flat, grouped.column("__af_n").to_numpy(zero_copy_only=False).astype(np.int64))
    return counts


def exact_sum(table: TypedTable, column: str, bounds: tuple[float, float], resolution: float,
              ctx: StepContext) -> tuple[int, int, int]:
    """``(sum, count, sensitivity)`` in grid units: each non-missing value clamped to ``bounds``
    and rounded to a multiple of ``resolution`` (``round(clamp(x) / resolution)``, an integer),
    summed exactly (HUGEINT); the count of non-missing values; ``max(|lo|, |hi|)`` in grid
    units, what one record adds or removes at most."""
    c = sql_ident(column)
    unit = "CAST(round(?::DOUBLE / ?::DOUBLE) AS BIGINT)"
    row = ctx.sql(f"SELECT sum(CAST(round(least(greatest({c}::DOUBLE, ?::DOUBLE), ?::DOUBLE) / ?::DOUBLE) AS BIGINT))"
                  f"::HUGEINT AS s, count({c})::BIGINT AS n, {unit} AS lo, {unit} AS hi FROM t",
                  [bounds[0], bounds[1], resolution, bounds[0], resolution, bounds[1], resolution], t=table)
    s, n, lo, hi = (row.column(k)[0].as_py() for k in ("s", "n", "lo", "hi"))
    s = int(s or 0)
    if abs(s) >= I64 or max(abs(lo), abs(hi)) >= I64:
        raise InputError(f"dp-aggregates: the sum of {column!r} in units of {resolution:g} leaves the 64-bit range "
                         "OpenDP adds noise in: choose a coarser resolution")
    return s, int(n), max(abs(int(lo)), abs(int(hi)), 1)


def default_resolution(table: TypedTable, column: str, bounds: tuple[float, float]) -> float:
    """1 for an integer column; for another, six significant digits of the larger bound."""
    t = table.schema.field(column).type
    if pa.types.is_integer(t) and float(bounds[0]).is_integer() and float(bounds[1]).is_integer():
        return 1.0
    return 10.0 ** (math.floor(math.log10(max(abs(bounds[0]), abs(bounds[1])))) - 6)


def measurement(dp: Any, mechanism: str, sensitivity: int, share: float, vector: bool) -> tuple[Any, float]:
    """OpenDP's measurement for integers (a vector of counts or one sum) and its scale, the
    one OpenDP derives (``binary_search_param``) so that ``map(sensitivity) <= share``."""
    if vector:
        metric = dp.l1_distance(T="i64") if MECHANISMS[mechanism][3] == "l1" else dp.l2_distance(T="i64")
        space = (dp.vector_domain(dp.atom_domain(T="i64")), metric)
    else:
        space = (dp.atom_domain(T="i64"), dp.absolute_distance(T="i64"))
    make = dp.m.make_laplace if mechanism == "laplace" else dp.m.make_gaussian
    scale = dp.binary_search_param(lambda s: make(*space, scale=s), d_in=sensitivity, d_out=share)
    return make(*space, scale=scale), float(scale)


def _cells_digest(data: pa.Table, keys: list[str]) -> str:
    text = json.dumps([data.column(k).to_pylist() for k in keys], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _escape(values: list[str]) -> pa.Array:
    return pa.array([("'" + v) if FORMULA_START.match(v) else v for v in values], pa.string())


class DpAggregates(Publisher):
    name = "dp-aggregates"
    version = __version__
    reproducible = False  # OpenDP's sampler is cryptographically safe: no seed reproduces its noise
    description = ("Differentially private marginals (every cell of the declared domains), bounded sums and means, "
                   "as CSV files: exact figures from DuckDB, noise from OpenDP (discrete Laplace or Gaussian).")
    params = (
        Param("path", "str", help="output folder, relative to --out-dir or the workflow file's folder"),
        Param("marginals", "list", default=None, nullable=True,
              help="contingency tables: each a column or a list of columns ([sex], [sex, race]); every cell of "
                   "the cross product of their declared domains is released, zero cells included"),
        Param("sums", "list", items="str", default=None, nullable=True, help="numeric columns to sum (need bounds)"),
        Param("means", "list", items="str", default=None, nullable=True, help="numeric columns to average (need "
                                                                                "bounds)"),
        Param("bounds", "dict", default=None, nullable=True,
              help="column -> [lo, hi]: each value is clamped into it before summing (declared, never from the data)"),
        Param("domain", "dict", default=None, nullable=True,
              help="column -> its categories; default: an ordinal's order, else an arx/taxonomy hierarchy's leaves"),
        Param("resolution", "dict", default=None, nullable=True,
              help="column -> grid the clamped values are rounded to before summing (default 1 for integer "
                   "columns, else 1e-6 of the larger bound's power of ten)"),
        Param("mechanism", "str", default="laplace", choices=("laplace", "gaussian"),
              help="laplace: discrete Laplace, pure ε-DP; gaussian: discrete Gaussian, ρ-zCDP"),
        Param("epsilon", "float", default=None, nullable=True, above=0.0,
              help="the total ε the laplace mechanism spends, split over the queries"),
        Param("rho", "float", default=None, nullable=True, above=0.0,
              help="the total ρ the gaussian mechanism spends, split over the queries"),
        Param("split", "list", items="float", default=None, nullable=True,
              help="one weight per query (marginals, then sums, then means): its share of the budget; default equal"),
        Param("non_negative", "bool", default=False,
              help="post-processing: noisy counts and sums below 0 are published as 0"),
        Param("max_cells", "int", default=1_000_000, min=1, help="the most cells one marginal may have"),
    )

    def output_files(self, params: Mapping[str, Any]) -> list[str]:
        return [params["path"]] if isinstance(params.get("path"), str) else []

    def privacy_loss(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The whole budget, in the mechanism's measure: the queries' shares add up to it (basic
        composition of pure ε-DP, or of ρ-zCDP)."""
        mech = params.get("mechanism") or "laplace"
        label, measure, key, _ = MECHANISMS[mech]
        return {"measure": measure, key: float(params[key]), "mechanism": label, "queries": len(plan(params))}

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        queries = plan(params)
        if table is None:
            return
        for q in queries:
            for c in q.columns:
                if c not in table.columns:
                    raise InputError(f"dp-aggregates: unknown column {c!r} (the table has "
                                     f"{', '.join(x for x in table.columns if not x.startswith('_'))})")
            if q.kind == "marginal":
                cells = math.prod(len(domain_of(table, c, params)) for c in q.columns)
                if cells > params.get("max_cells", 1_000_000):
                    raise InputError(f"dp-aggregates: marginal {list(q.columns)} has {cells} cells, more than "
                                     f"max_cells {params.get('max_cells', 1_000_000)}")
            else:
                t = table.schema.field(q.columns[0]).type
                if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
                    raise InputError(f"dp-aggregates: column {q.columns[0]!r} holds {t}, not numbers: it cannot be "
                                     f"{'summed' if q.kind == 'sum' else 'averaged'}")

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        dp = opendp()
        self.check(params, table)
        mech = params["mechanism"]
        queries = plan(params)
        outputs: list[Output] = []
        released: dict[str, Any] = {}
        numeric_rows: list[tuple[str, str, float, float, float]] = []
        for q in queries:
            if q.kind == "marginal":
                domains = [domain_of(table, c, params) for c in q.columns]
                exact = exact_marginal(table, q.columns, domains, ctx)
                meas, scale = measurement(dp, mech, 1, q.share, vector=True)
                noisy = np.asarray(meas(exact.tolist()), dtype=np.int64)
                if params["non_negative"]:
                    noisy = np.maximum(noisy, 0)
                grid = np.indices([len(d) for d in domains]).reshape(len(domains), -1)
                data = pa.table({**{c: _escape([d[i] for i in g]) for c, d, g in zip(q.columns, domains, grid)},
                                 "count": pa.array(noisy, pa.int64())})
                q.record = {"query": "marginal", "columns": list(q.columns), "sensitivity": 1, "scale": scale,
                            MECHANISMS[mech][2]: float(meas.map(1)), "cells": int(len(exact))}
                outputs.append(self._write(ctx, params, q.file, data, list(q.columns), released, q.record))
                continue
            column = q.columns[0]
            res = q.resolution or default_resolution(table, column, q.bounds)
            total, count, sens = exact_sum(table, column, q.bounds, res, ctx)
            share = q.share if q.kind == "sum" else q.share / 2
            meas, scale = measurement(dp, mech, sens, share, vector=False)
            noisy_sum = int(meas(total)) * res
            loss = float(meas.map(sens))
            q.record = {"query": q.kind, "columns": [column], "bounds": list(q.bounds), "resolution": res,
                        "sensitivity": sens, "scale": scale, "scale_in_values": scale * res}
            if q.kind == "sum":
                value = max(noisy_sum, 0.0) if params["non_negative"] else noisy_sum
            else:
                cmeas, cscale = measurement(dp, mech, 1, share, vector=False)
                noisy_count = int(cmeas(count))
                loss += float(cmeas.map(1))
                # post-processing: a mean outside the bounds (a small noisy count) is brought back into them
                value = min(max(noisy_sum / max(noisy_count, 1), q.bounds[0]), q.bounds[1])
                q.record.update(count_sensitivity=1, count_scale=cscale)
            q.record[MECHANISMS[mech][2]] = loss
            numeric_rows.append((column, q.kind, q.bounds[0], q.bounds[1], float(value)))
        if numeric_rows:
            cols = list(zip(*numeric_rows))
            data = pa.table({"column": _escape(list(cols[0])), "statistic": pa.array(cols[1], pa.string()),
                             "lower": pa.array(cols[2], pa.float64()), "upper": pa.array(cols[3], pa.float64()),
                             "value": pa.array(cols[4], pa.float64())})
            records = [q.record for q in queries if q.kind != "marginal"]
            outputs.append(self._write(ctx, params, "numeric.csv", data, ["column", "statistic", "lower", "upper"],
                                       released, records))
        accounting = {"mechanism": MECHANISMS[mech][0], "measure": MECHANISMS[mech][1],
                      MECHANISMS[mech][2]: float(params[MECHANISMS[mech][2]]), "neighbouring": NEIGHBOURS,
                      "sampler": "OpenDP (cryptographically safe; not reproducible)",
                      "queries": [q.record for q in queries]}
        spent = sum(q.record[MECHANISMS[mech][2]] for q in queries)
        if spent > float(params[MECHANISMS[mech][2]]) * (1 + 1e-9):  # OpenDP's maps must stay inside the budget
            raise InputError(f"dp-aggregates: the queries spend {spent!r}, more than the budget")
        path = ctx.resolve_output(f"{params['path']}/accounting.json")
        text = json.dumps(accounting, indent=2, sort_keys=True) + "\n"
        outputs.append(Output(str(path), atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8")),
                              None))
        # what verify --rerun compares of each noised file: its columns, which cells, rows (never the values)
        ctx.record_fitted("dp_release", released)
        ctx.note(f"dp-aggregates: {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} released with "
                 f"{MECHANISMS[mech][0]} noise, {MECHANISMS[mech][2]} = {params[MECHANISMS[mech][2]]:g} in all")
        return outputs

    @staticmethod
    def _write(ctx: StepContext, params: Mapping[str, Any], name: str, data: pa.Table, keys: list[str],
               released: dict[str, Any], record: Any) -> Output:
        path = ctx.resolve_output(f"{params['path']}/{name}")
        digest = atomic_write(path, lambda tmp: pacsv.write_csv(data, str(tmp)))
        released[name] = {"columns": data.column_names, "noised": [c for c in data.column_names if c not in keys],
                          "rows": data.num_rows, "cells_sha256": _cells_digest(data, keys), "queries": record}
        return Output(str(path), digest, data.num_rows)


PLUGINS = [DpAggregates()]
