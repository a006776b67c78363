"""The ``parquet`` source: one Parquet file, read by DuckDB in its order."""

from __future__ import annotations

from typing import Any

from ..sandbox import duckdb_file
from ..sourcekind import SourceSpec
from ._base import FileSource


class ParquetSource(FileSource):
    name = "parquet"
    description = "a Parquet file"
    extensions = (".parquet", ".pq")

    def read_expr(self, src: SourceSpec, whole: bool = True, types: dict[str, str] | None = None
                  ) -> tuple[str, list[Any]]:
        return "SELECT * FROM read_parquet(?)", [duckdb_file(src.path)]


SOURCE = ParquetSource()
