"""The ``arrow`` source: an in-memory table (a pandas or polars DataFrame, or an Arrow table)
handed to a workflow in Python (:mod:`anonflow.workflow_api`) instead of a file.

:func:`to_arrow` turns what it is given into an Arrow table without going through Python
objects record by record (polars: ``to_arrow()``, which shares its buffers; pandas:
``pyarrow.Table.from_pandas(preserve_index=False)``; Arrow as it is). The store registers that
table with DuckDB, which reads its buffers in place, and writes it into the store like a file
source's records (:meth:`anonflow.store.Store.ingest`).

:func:`arrow_sha256` is the content hash the run records for it in place of a file's sha256:
the same table always gives the same hash, so a step fed by the same DataFrame is served from
the cache like one fed by the same file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

import duckdb

from ..errors import InputError, WorkflowError
from ..sandbox import connect, duck_message
from ..sourcekind import Source, SourceSpec
from ._base import checker, ingest, register_arrow, where

#: the format of an in-memory table in a workflow's mapping (``{format: arrow, sha256: ...}``)
IN_MEMORY = "arrow"

#: records per record batch in the IPC stream :func:`arrow_sha256` hashes
IPC_BATCH_ROWS = 65_536


def is_table(obj: Any) -> bool:
    """Whether ``obj`` is something :func:`to_arrow` takes (a table, not a path or a mapping)."""
    if isinstance(obj, (str, bytes)) or obj is None:
        return False
    import pyarrow as pa

    if isinstance(obj, (pa.Table, pa.RecordBatch)):
        return True
    module = type(obj).__module__ or ""
    if module.startswith("pandas") and type(obj).__name__ == "DataFrame":
        return True
    return callable(getattr(obj, "to_arrow", None)) or hasattr(obj, "__arrow_c_stream__")


def to_arrow(obj: Any, *, where: str = "") -> Any:
    """``obj`` as a ``pyarrow.Table``: an Arrow table as it is, a record batch as a table, a
    pandas DataFrame by ``pyarrow.Table.from_pandas(obj, preserve_index=False)`` (the index is
    not a column: reset it first to keep it), anything with ``to_arrow()`` (a polars DataFrame)
    by calling it, and any object exporting the Arrow C stream interface by ``pyarrow.table``.
    Anything else, or a table whose column names repeat, is an :class:`InputError`."""
    import pyarrow as pa

    if isinstance(obj, pa.Table):
        table = obj
    elif isinstance(obj, pa.RecordBatch):
        table = pa.Table.from_batches([obj])
    elif (type(obj).__module__ or "").startswith("pandas") and type(obj).__name__ == "DataFrame":
        try:
            table = pa.Table.from_pandas(obj, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise InputError(f"cannot convert the pandas DataFrame to Arrow: {str(exc).splitlines()[0]}",
                             where=where or None) from None
    elif callable(getattr(obj, "to_arrow", None)):
        table = obj.to_arrow()
        if isinstance(table, pa.RecordBatchReader):
            table = table.read_all()
        elif isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise InputError(f"{type(obj).__name__}.to_arrow() returned {type(table).__name__}, not an Arrow table",
                             where=where or None)
    elif hasattr(obj, "__arrow_c_stream__"):
        table = pa.table(obj)
    else:
        raise InputError(f"expected a pandas or polars DataFrame or an Arrow table, got {type(obj).__name__}",
                         where=where or None)
    seen: dict[str, str] = {}
    for name in table.column_names:
        first = seen.setdefault(name.lower(), name)
        if first is not name:
            also = "" if first == name else f" (as {name!r}: names ignore case in DuckDB)"
            raise InputError(f"the table names column {first!r} twice{also}; give every column its own name",
                             where=where or None)
    return table


class _Sha256Sink:
    """A write-only file object that hashes what is written to it."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.hash.update(view)
        return view.nbytes

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def arrow_sha256(table: Any) -> str:
    """The content hash of an in-memory source: the hex SHA-256 of the bytes of an Arrow IPC
    *stream* (``pyarrow.ipc.new_stream`` with the default ``IpcWriteOptions``: no compression,
    the current metadata version) holding the table with its schema-level metadata removed
    (pandas writes its own version and index description there) and its columns combined into
    one chunk each, written as record batches of :data:`IPC_BATCH_ROWS` (65,536) records (the
    last one shorter; an empty table is the schema alone).

    So the hash depends on the column names, their Arrow types and the values in order, not on
    how the table happens to be chunked or which pandas wrote it; the same DataFrame (or the
    same data converted again) gives the same hash. Converting is not neutral: a pandas
    ``int64`` column and a polars ``Int32`` one are different types, so different tables."""
    import pyarrow as pa

    table = table.replace_schema_metadata(None).combine_chunks()
    sink = _Sha256Sink()
    with pa.PythonFile(sink, mode="w") as out, pa.ipc.new_stream(out, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=IPC_BATCH_ROWS):
            writer.write_batch(batch)
    return sink.hash.hexdigest()


class ArrowSource(Source):
    """An in-memory table: its content hash is :func:`arrow_sha256`, given with it."""

    name = IN_MEMORY
    description = "an in-memory table given in Python (never in a workflow file)"
    in_memory = True

    def claims(self, data: Mapping[str, Any]) -> bool:
        return data.get("format") == IN_MEMORY or "sha256" in data

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        if data.get("format") != IN_MEMORY or name not in tables:
            raise WorkflowError(f"an in-memory table (format {IN_MEMORY}, sha256) is given in Python, not in a "
                                "workflow file: pass the DataFrame or Arrow table in Python (anonflow.Workflow, or "
                                "run(sources={NAME: table}) on a loaded workflow)")
        return SourceSpec(name=name, format=IN_MEMORY, data=tables[name], sha256=str(data.get("sha256")), kind=self)

    def describe(self, src: SourceSpec) -> str:
        return f"in-memory table {src.name} (sha256 {str(src.sha256)[:16]}...)"

    def no_records(self, src: SourceSpec) -> str:
        return f"the in-memory table {src.name!r} has no records"

    def content_hash(self, src: SourceSpec) -> str:
        return str(src.sha256)

    def origin(self, src: SourceSpec) -> str:
        return f"memory:{src.name}"

    def recorded(self, src: SourceSpec) -> tuple[dict[str, Any], str]:
        return {"path": None, "table": None, "in_memory": src.name}, self.origin(src)

    def files(self, src: SourceSpec) -> list[Path]:
        return []


    def columns(self, src: SourceSpec) -> list[tuple[str, str]]:
        """DuckDB's names of the Arrow types (registered: nothing is copied)."""
        checker(self, src)(src.data.column_names, src.data.num_rows)
        con = connect()
        try:
            con.register("_af_incoming", src.data)
            return [(r[0], r[1]) for r in con.execute("DESCRIBE SELECT * FROM _af_incoming").fetchall()]
        except duckdb.Error as exc:
            raise InputError(f"DuckDB cannot read the in-memory table: {duck_message(exc)}", where=where(src)) from None
        finally:
            con.close()

    def load(self, store: Any, src: SourceSpec, *, run_id: str) -> Any:
        # registered (DuckDB reads its buffers in place) and written into the store once, in its order
        def fill(con: Any, table: str) -> dict[str, str]:
            register_arrow(con, src.data, table, "DuckDB cannot read the in-memory table", src)
            return {}

        return ingest(self, store, src, run_id, fill)


SOURCE = ArrowSource()
