"""In-memory sources: a pandas or polars DataFrame, or an Arrow table, handed to a workflow in
Python (:mod:`anonflow.workflow_api`) instead of a file.

:func:`to_arrow` turns what it is given into an Arrow table without going through Python
objects record by record (polars: ``to_arrow()``, which shares its buffers; pandas:
``pyarrow.Table.from_pandas(preserve_index=False)``; Arrow as it is). The store registers that
table with DuckDB, which reads its buffers in place, and writes it into the store like a file
source's records (:meth:`anonflow.store.Store.load_source`).

:func:`arrow_sha256` is the content hash the run records for it in place of a file's sha256:
the same table always gives the same hash, so a step fed by the same DataFrame is served from
the cache like one fed by the same file.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .errors import InputError

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
