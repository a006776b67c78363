"""What a source is: its parsed declaration (:class:`SourceSpec`) and the protocol every kind of
source implements (:class:`Source`). The kinds themselves live in :mod:`anonflow.sources`, one
module each; a third party registers more through the ``anonflow_register_sources`` hook
(:mod:`anonflow.hookspecs`). This module imports nothing of the engine but its errors, so the
plugin API, the workflow format and the store can all name these types."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import WorkflowError
from .params import suggest


@dataclass(frozen=True)
class SourceSpec:
    """A named input table, as its source kind parsed it from the workflow: ``format`` names
    the kind (``csv``, ``parquet``, ``parquet-dataset``, ``duckdb``, ``postgres``, ``arrow``
    or a third party's), ``kind`` is that :class:`Source` object. A file source has a
    ``path``; a DuckDB or PostgreSQL source a ``table``; ``options`` holds the rest of its
    declaration (a CSV's delimiter, a PostgreSQL URL and query...). An in-memory table
    (format ``arrow``, from the Python API only) has ``data`` and its content hash
    ``sha256`` (:func:`anonflow.sources.inmemory.arrow_sha256`), which the run records in
    place of a file's."""

    name: str
    format: str
    path: Path | None = None
    table: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    data: Any = field(default=None, compare=False, repr=False)
    sha256: str | None = None
    kind: Any = field(default=None, compare=False, repr=False)

    @property
    def in_memory(self) -> bool:
        return bool(getattr(self.kind, "in_memory", False))

    def describe(self) -> str:
        """The source in a message: its file, its table, its query."""
        return self.kind.describe(self) if self.kind is not None else str(self.path)


class Source:
    """A kind of source: how it is declared, described, read into the store and hashed, and
    what a re-run needs of it. One object per kind, looked up by its ``name`` (the
    ``format:`` of a declaration).

    Methods receive the :class:`SourceSpec` their :meth:`parse` returned; reading methods
    raise :class:`anonflow.errors.InputError` naming the source (``where="source 'NAME'"``),
    never a DuckDB or driver exception."""

    #: the ``format:`` that names this kind in a workflow file
    name: str = ""
    #: one line for ``anonflow plugins`` and the docs
    description: str = ""
    version: str = ""
    #: file name endings (lower case) that tell this kind when a declaration gives no format
    extensions: tuple[str, ...] = ()
    #: declaration keys that tell this kind when no ``format:`` is given and no kind
    #: :meth:`claims` the declaration (``table:``: a DuckDB table)
    implied_by: tuple[str, ...] = ()
    #: the content is known only once read (a database server's table): every run reads it,
    #: and its content hash is that of the records as read, never served from the cache
    remote: bool = False
    #: given in Python only (never in a workflow file)
    in_memory: bool = False

    # -- the declaration ------------------------------------------------------------------

    def claims(self, data: Mapping[str, Any]) -> bool:
        """Whether a declaration is this kind whatever its ``format:`` says (a key only this
        kind takes, such as ``postgres:``). Default: no."""
        return False

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        """The declaration ``data`` (a mapping; relative paths against ``base``) as a
        :class:`SourceSpec` with ``kind=self``; raise :class:`WorkflowError` (one line, no
        location: the caller adds the file and source) for what the schema cannot tell.
        ``tables``: in-memory tables given in Python, by source name."""
        raise NotImplementedError

    def describe(self, src: SourceSpec) -> str:
        return str(src.path)

    def no_records(self, src: SourceSpec) -> str:
        """The error when the source holds no records."""
        return f"{self.describe(src)} has no records"

    # -- reading ----------------------------------------------------------------------------

    def columns(self, src: SourceSpec) -> list[tuple[str, str]]:
        """Column names and DuckDB types, without reading every record (for planning)."""
        raise NotImplementedError

    def load(self, store: Any, src: SourceSpec, *, run_id: str) -> Any:
        """Read the source into ``store`` (:meth:`anonflow.store.Store.ingest`) and return its
        artifact."""
        raise NotImplementedError

    # -- what the run records, and what a re-run needs ---------------------------------------

    def content_hash(self, src: SourceSpec) -> str:
        """The sha256 of the content before it is read ('' when only reading tells: a
        :attr:`remote` source, a table of the store itself)."""
        return ""

    def origin(self, src: SourceSpec) -> str:
        """The lineage's name for where the records come from."""
        return str(src.path or src.table)

    def recorded(self, src: SourceSpec) -> tuple[dict[str, Any], str]:
        """What the step run records: its parameters, and the name of its input."""
        return {"path": str(src.path), "table": src.table, **src.options}, str(src.path)

    def destinations(self, src: SourceSpec) -> list[str]:
        """The servers the source reads from, as URLs (the egress policy checks their hosts
        before a run: :func:`anonflow.egress.check_plan`). Default: none."""
        return []

    def files(self, src: SourceSpec) -> list[Path]:
        """The files a run reads for this source, which a re-run pins and hashes."""
        return [src.path] if src.path is not None else []



def check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    """One line for a key ``what`` (``a parquet-dataset source``) does not take."""
    for key in data:
        if key not in allowed:
            raise WorkflowError(f"unknown key {key!r}{suggest(str(key), allowed)}; {what} takes " + ", ".join(allowed))
