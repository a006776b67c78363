"""Lossy-join (Anatomy-style) publication: a QI table and an SA table joined on the class id
(SPEC section 7, seed 002 section 4.1).

* QI table: the quasi-identifier values exactly as the table holds them, then the other
  published columns (insensitive attributes, labels; ``_row`` only when the publish step
  keeps it with ``row_id: true``), then the class id. No sensitive value.
* SA table: class id, sensitive value, count -- one row per (class, value) present.

Any table with ``_class`` and one sensitive attribute can be published this way: the classes
of ``alpha-i-k-gca`` and ``alpha-k-gca``, and equally ``mdav`` groups. Both tables are written
as files (Parquet or CSV, atomically) and kept in the store (``ctx.store_table``: views
``steps."<workflow>.<step>.qi"`` and ``steps."<workflow>.<step>.sa"``). Parquet files carry
``anonflow.lossy-join`` schema metadata naming their role, the class column, the sensitive
attribute and the partner file, so a checker can pair them again
(:func:`anonflow_std.common.counts.pair_counts_sql`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import CLASS, InputError, Output, Param, Publisher, StepContext, TypedTable, atomic_write, sql_ident

from .. import __version__
from ..common.columns import sensitive_column
from ..publishing.publishers import csv_columns


def split_tables(table: TypedTable, sensitive: str, sql: Any, class_column: str = "class_id",
                 count_column: str = "count") -> tuple[pa.Table, pa.Table]:
    """The QI table and the SA table of ``table`` (which must hold ``_class``); ``sql`` is
    ``ctx.sql``."""
    data = table.data
    if CLASS not in data.column_names:
        raise InputError("lossy-join publishes classes: its input needs a _class column (the output of an "
                         "algorithm step)")
    if data.column(CLASS).null_count:
        raise InputError("lossy-join: some records have no class; suppressed records cannot be published")
    others = [s for s in table.typing.sensitive if s != sensitive]
    if others:
        raise InputError(f"lossy-join publishes one sensitive attribute ({sensitive!r}); the table also has "
                         f"{', '.join(map(repr, others))}: drop them in the typing step (others: drop) or give them "
                         "another role")
    for name in (class_column, count_column):
        if name in data.column_names:
            raise InputError(f"lossy-join: the table already has a column {name!r}; choose another name "
                             "(class_column / count_column)")
    quasi = table.typing.quasi
    rest = [c for c in data.column_names if c not in (*quasi, sensitive, CLASS)]  # _row only if row_id: true
    qi = data.select([*quasi, *rest]).append_column(class_column, data.column(CLASS))
    cls, s = sql_ident(CLASS), sql_ident(sensitive)
    sa = sql(f"SELECT {cls} AS {sql_ident(class_column)}, {s}, count(*) AS {sql_ident(count_column)} "
             f"FROM published GROUP BY {cls}, {s} ORDER BY {cls}, {s}", published=data.select([CLASS, sensitive]))
    return qi, sa


#: what the two k figures of a lossy-join publication mean (manifest, report, verify)
K_MEANING = ("class_k: k-anonymity of the classes (records per class id), not of the QI values -- what the lossy "
             "join guarantees for linking a record to a sensitive value; qi_table_k: the smallest group of identical "
             "QI tuples in the published QI table, class id ignored -- the QI table's k as an attacker sees it (the "
             "QI values are published exactly, so it may be 1)")


def k_figures(qi: pa.Table, quasi: Sequence[str], class_column: str, sql: Any) -> dict[str, float | None]:
    """The two k figures of a QI table: ``class_k`` (smallest class, by class id),
    ``qi_table_k`` (smallest group of identical QI tuples, class id ignored) and
    ``qi_table_unique_records`` (records whose QI tuple no other record shares); see
    :data:`K_MEANING`. None for an empty table."""
    q = [c for c in quasi if c in qi.column_names and c != class_column]
    cls = sql_ident(class_column)
    group = f"GROUP BY {', '.join(sql_ident(c) for c in q)}" if q else ""
    row = sql(f"""
        WITH c AS (SELECT count(*) AS n FROM qi GROUP BY {cls}),
             g AS (SELECT count(*) AS n FROM qi {group})
        SELECT (SELECT min(n) FROM c) AS class_k, (SELECT min(n) FROM g WHERE n > 0) AS qi_table_k,
               (SELECT count(*) FROM g WHERE n = 1) AS unique_records
    """, qi=qi.select([*q, class_column])).to_pylist()[0]
    empty = qi.num_rows == 0
    return {"class_k": None if empty else float(row["class_k"]),
            "qi_table_k": None if empty else float(row["qi_table_k"]),
            "qi_table_unique_records": float(row["unique_records"] or 0)}


def k_sentence(ks: Mapping[str, float | None]) -> str:
    """The two k figures in words (the run's note, the report, verify)."""
    def n(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"
    return (f"k-anonymity of the classes (records per class id) = {n(ks['class_k'])}, not of the QI values: the "
            f"published QI table's smallest group of identical QI tuples holds {n(ks['qi_table_k'])} record(s) "
            f"(its k as an attacker sees it; {n(ks['qi_table_unique_records'])} record(s) have a unique QI tuple)")


#: first characters that make a spreadsheet read a cell as a formula (OWASP: CSV injection)
HEADER_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def check_header_name(publisher: str, param: str, value: Any) -> None:
    """A column name a publisher makes up (``class_column``, ``count_column``) becomes a CSV
    header cell, which is not escaped: refuse one a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(HEADER_FORMULA_STARTS):
        raise InputError(f"{publisher}: {param} {value!r} begins with {value[0]!r}, so a spreadsheet opening the "
                         "published CSV would run its header cell as a formula; choose a name that begins with a "
                         "letter or digit")


class LossyJoin(Publisher):
    name = "lossy-join"
    version = __version__
    outputs = ("path", "qi_path", "sa_path")
    description = ("Lossy-join publication (SPEC section 7): a QI table (exact QI values + class id) and an SA "
                   "table (class id, sensitive value, count), as files and in the store.")
    params = (
        Param("path", "str", default=None, nullable=True,
              help="file prefix: writes <path>-qi.<ext> and <path>-sa.<ext>"),
        Param("qi_path", "str", default=None, nullable=True, help="or the QI table's file"),
        Param("sa_path", "str", default=None, nullable=True, help="and the SA table's file"),
        Param("format", "str", default="parquet", choices=("parquet", "csv")),
        Param("class_column", "str", default="class_id", help="name of the class id column in both tables"),
        Param("count_column", "str", default="count", help="name of the count column of the SA table"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed)"),
        Param("store", "bool", default=True,
              help="also keep both tables in the store (views <workflow>.<step>.qi and .sa)"),
    )

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        prefix = params["path"] is not None
        if prefix and (params["qi_path"] is not None or params["sa_path"] is not None):
            raise InputError("lossy-join: give 'path' or 'qi_path' and 'sa_path', not both")
        if not prefix and (params["qi_path"] is None or params["sa_path"] is None):
            raise InputError("lossy-join needs either 'path' (a file prefix) or both 'qi_path' and 'sa_path'")
        for param in ("class_column", "count_column"):
            check_header_name(self.name, param, params[param])
        if params["class_column"] == params["count_column"]:
            raise InputError("lossy-join: class_column and count_column must differ")

    def output_files(self, params: Mapping[str, Any]) -> list[str]:
        if params.get("path") is not None:
            ext = "parquet" if params.get("format", "parquet") == "parquet" else "csv"
            return [f"{params['path']}-qi.{ext}", f"{params['path']}-sa.{ext}"]
        return [p for p in (params.get("qi_path"), params.get("sa_path")) if isinstance(p, str)]

    def paths(self, params: Mapping[str, Any], ctx: StepContext) -> tuple[Path, Path]:
        if params["path"] is not None:
            ext = "parquet" if params["format"] == "parquet" else "csv"
            return (ctx.resolve_output(f"{params['path']}-qi.{ext}"), ctx.resolve_output(f"{params['path']}-sa.{ext}"))
        return ctx.resolve_output(params["qi_path"]), ctx.resolve_output(params["sa_path"])

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        self.check(params)
        s = sensitive_column(table, params["sensitive"], self.name)
        qi, sa = split_tables(table, s, ctx.sql, params["class_column"], params["count_column"])
        qi_path, sa_path = self.paths(params, ctx)
        meta = {"class_column": params["class_column"], "sensitive": s, "count_column": params["count_column"]}
        outputs = []
        for role, data, path, partner in (("qi", qi, qi_path, sa_path), ("sa", sa, sa_path, qi_path)):
            if params["format"] == "parquet":
                info = json.dumps({**meta, "role": role, "partner": partner.name}, sort_keys=True)
                data_m = data.replace_schema_metadata({"anonflow.lossy-join": info})

                def write(tmp: Path, d: pa.Table = data_m) -> None:
                    pq.write_table(d, str(tmp), compression="zstd")
            else:  # text cells that a spreadsheet would read as a formula get a leading ' (publishers.py)
                def write(tmp: Path, d: pa.Table = csv_columns(data)) -> None:
                    pacsv.write_csv(d, str(tmp), write_options=pacsv.WriteOptions(include_header=True))
            digest = atomic_write(path, write)
            outputs.append(Output(str(path), digest, data.num_rows))
            if params["store"] and ctx.store_table is not None:
                ctx.store_table(role, data)
        ks = k_figures(qi, table.typing.quasi, params["class_column"], ctx.sql)
        ctx.note(f"lossy-join: {qi.num_rows} QI rows, {sa.num_rows} (class, {s}) counts in "
                 f"{pc.count_distinct(qi.column(params['class_column'])).as_py()} classes; "
                 + k_sentence(ks))
        return outputs


PLUGINS = [LossyJoin()]
