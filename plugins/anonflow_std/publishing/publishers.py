"""Publishers: CSV and Parquet files, written atomically and deterministically.

Every CSV file anonflow writes (this ``csv`` publisher, the ``lossy-join`` publisher's CSV
files, a release's CSV files) guards against CSV formula injection: a text cell that begins
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is written with a single quote
``'`` in front (OWASP's advice), so a spreadsheet shows it as text instead of evaluating it.
Only text columns are escaped; numbers, booleans and dates never are. The ``csv`` publisher
can turn this off (``escape_formulas: false``); releases always escape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import Output, Param, Publisher, StepContext, TypedTable, atomic_write, sql_ident

from .. import __version__


#: text cells that a spreadsheet would read as a formula (OWASP: CSV injection)
FORMULA_START = r"^[=+\-@\t\r]"


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def escape_formulas(arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A text column with ``'`` put in front of every cell that begins with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return (null stays null); vectorized."""
    starts = pc.match_substring_regex(arr, FORMULA_START)
    return pc.if_else(starts, pc.binary_join_element_wise(pa.scalar("'", arr.type), arr, pa.scalar("", arr.type)), arr)


def sql_escape_formulas(expr: str) -> str:
    """:func:`escape_formulas` in SQL, for a text expression."""
    return f"CASE WHEN regexp_matches({expr}, '{FORMULA_START}') THEN '''' || {expr} ELSE {expr} END"


def csv_columns(data: pa.Table, json_text: Any = None, escape: bool = True) -> pa.Table:
    """``data`` as CSV writes it: dictionary columns decoded, nested columns as JSON text
    (``json_text``, default :func:`_json_text`), and with ``escape`` every text column's
    formula-like cells escaped (:func:`escape_formulas`)."""
    to_json = json_text or _json_text
    for i, f in enumerate(data.schema):
        col = data.column(i)
        if pa.types.is_dictionary(f.type):
            col = col.cast(f.type.value_type)
        if _is_nested(col.type):
            col = to_json(col)
        if escape and _is_text(col.type):
            col = escape_formulas(col)
        if col is not data.column(i):
            data = data.set_column(i, f.name, col)
    return data


def _json_text(arr: pa.Array) -> pa.Array:
    """A nested column as JSON text per cell (null stays null): ``["China","India"]``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    value_type = arr.type.value_type if (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)) else None
    if value_type is not None and not _is_nested(value_type):
        # vectorized: quote each distinct element once, then join the lists' elements
        enc = pc.dictionary_encode(pc.list_flatten(arr), null_encoding="encode")
        quoted = pa.array([json.dumps(v, ensure_ascii=False) for v in enc.dictionary.to_pylist()],
                          pa.string()).take(enc.indices)
        offsets = pc.subtract(arr.offsets, arr.offsets[0])
        lists = (pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray).from_arrays(
            offsets, quoted, mask=arr.is_null())
        return pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")
    return pa.array([None if v is None else json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
                     for v in arr.to_pylist()], pa.string())


class CsvPublisher(Publisher):
    name = "csv"
    version = __version__
    description = ("Write the table as a CSV file (header row, minimal quoting; text cells that a spreadsheet would "
                   "read as a formula are escaped with a leading ').")
    params = (
        Param("path", "str", help="output file, relative to --out-dir or the workflow file's folder"),
        Param("delimiter", "str", default=",", help="field separator (one character)"),
        Param("nested", "str", default="json", choices=("json", "drop"),
              help="list/struct columns, which CSV cannot hold: write each cell as JSON text, or drop the column"),
        Param("escape_formulas", "bool", default=True,
              help="put ' in front of text cells beginning with =, +, -, @, tab or carriage return (CSV injection)"),
    )

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        path = ctx.resolve_output(params["path"])
        nested = [f.name for f in table.schema if _is_nested(f.type)]
        if not table.loaded and not nested and ctx.copy_to is not None:
            # in the store: DuckDB writes the file (COPY), escaping formula-like text cells in SQL
            exprs = {f.name: (sql_escape_formulas(sql_ident(f.name)) if params["escape_formulas"] and _is_text(f.type)
                              else sql_ident(f.name)) for f in table.schema}
            options = {"HEADER": True, "DELIMITER": params["delimiter"]}
            digest = atomic_write(path, lambda tmp: ctx.copy_to(table, tmp, format="csv", options=options,
                                                                columns=exprs))
            return [Output(str(path), digest, table.num_rows)]
        data = table.data
        if nested and params["nested"] == "drop":
            data = data.drop_columns(nested)
            ctx.note(f"csv: nested column(s) {', '.join(nested)} dropped (nested: drop)")
        data = csv_columns(data, escape=params["escape_formulas"])
        opts = pacsv.WriteOptions(include_header=True, delimiter=params["delimiter"])
        digest = atomic_write(path, lambda tmp: pacsv.write_csv(data, str(tmp), write_options=opts))
        return [Output(str(path), digest, table.num_rows)]


class ParquetPublisher(Publisher):
    name = "parquet"
    version = __version__
    description = "Write the table as a Parquet file, with the typing in its schema metadata."
    params = (
        Param("path", "str", help="output file, relative to --out-dir or the workflow file's folder"),
        Param("compression", "str", default="zstd", choices=("zstd", "snappy", "gzip", "none")),
    )

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        path = ctx.resolve_output(params["path"])
        if not table.loaded and ctx.copy_to is not None:
            # in the store: DuckDB writes the file (COPY), the typing in the file's key-value metadata
            options = {"COMPRESSION": "uncompressed" if params["compression"] == "none" else params["compression"],
                       "KV_METADATA": {"anonflow.typing": table.typing.dumps()}}
            digest = atomic_write(path, lambda tmp: ctx.copy_to(table, tmp, format="parquet", options=options))
            return [Output(str(path), digest, table.num_rows)]
        data = table.data.replace_schema_metadata({"anonflow.typing": table.typing.dumps()})

        def write(tmp: Path) -> None:
            pq.write_table(data, str(tmp), compression=params["compression"])

        digest = atomic_write(path, write)
        return [Output(str(path), digest, table.num_rows)]


PLUGINS = [CsvPublisher(), ParquetPublisher()]
