"""Publishers: CSV and Parquet files, written atomically and deterministically."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from anonflow.api import Output, Param, Publisher, StepContext, TypedTable, atomic_write

from . import __version__


class CsvPublisher(Publisher):
    name = "csv"
    version = __version__
    description = "Write the table as a CSV file (header row, minimal quoting)."
    params = (
        Param("path", "str", help="output file, relative to --out-dir or the workflow file's folder"),
        Param("delimiter", "str", default=",", help="field separator (one character)"),
    )

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        path = ctx.resolve_output(params["path"])
        opts = pacsv.WriteOptions(include_header=True, delimiter=params["delimiter"])
        digest = atomic_write(path, lambda tmp: pacsv.write_csv(table.data, str(tmp), write_options=opts))
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
        data = table.data.replace_schema_metadata({"anonflow.typing": table.typing.dumps()})

        def write(tmp: Path) -> None:
            pq.write_table(data, str(tmp), compression=params["compression"])

        digest = atomic_write(path, write)
        return [Output(str(path), digest, table.num_rows)]


PLUGINS = [CsvPublisher(), ParquetPublisher()]
