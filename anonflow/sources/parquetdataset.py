"""The ``parquet-dataset`` source: every Parquet file of a folder, or those a glob pattern
matches, read by DuckDB as one table (``{format: parquet-dataset, path: FOLDER or GLOB}``).

Which files, and in which order, never depends on the file system: a folder's ``*.parquet``
files at any depth, or a pattern's matches (``**`` crosses folders), are sorted by their path
relative to the folder the user named (for a pattern, the folder before its first wildcard),
and read in that order, so the records' ``_row`` numbers are the same on every machine. A
file that resolves outside that folder (a symbolic link leading elsewhere) is refused, and so
is a folder or pattern that names no file. The content hash is the sha256 of the list of
``relative path, NUL, file sha256, newline`` lines in that order: the same files with the same
contents give the same hash wherever they lie.
"""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError, WorkflowError
from ..sandbox import duckdb_file
from ..sourcekind import SourceSpec, check_keys
from ._base import FileSource, check_file, sha256_of, where

#: a character that makes ``path`` a pattern rather than a folder
WILDCARDS = "*?["


class ParquetDatasetSource(FileSource):
    name = "parquet-dataset"
    description = "the Parquet files of a folder, or those a glob pattern matches, as one table"
    option_keys = ()

    def parse(self, name: str, data: Mapping[str, Any], base: Path, tables: Mapping[str, Any]) -> SourceSpec:
        check_keys(data, ("path", "format", "description"), "a parquet-dataset source")
        raw = data.get("path")
        if not isinstance(raw, str) or not raw.strip():
            raise WorkflowError("a parquet-dataset source needs 'path': a folder or a glob pattern of Parquet files")
        return SourceSpec(name=name, format=self.name, path=Path(os.path.abspath(base / raw)), kind=self)

    def listing(self, src: SourceSpec) -> list[tuple[str, Path]]:
        """The dataset's files, as (path relative to the named folder, file), in reading order."""
        text = str(src.path)
        if any(c in text for c in WILDCARDS):
            cut = min(text.index(c) for c in WILDCARDS if c in text)
            root = Path(text[:cut].rpartition(os.sep)[0] or os.sep)
            found = [Path(p) for p in glob.glob(text, recursive=True)]
        else:
            root = src.path
            if not root.exists():
                raise InputError(f"folder not found: {root}", where=where(src))
            if not root.is_dir():
                raise InputError(f"{root} is not a folder; a parquet-dataset names a folder or a glob pattern "
                                 "(a single file is format: parquet)", where=where(src))
            found = [Path(d) / f for d, _, files in os.walk(root) for f in files if f.lower().endswith(".parquet")]
        real_root = root.resolve()
        files = []
        for path in found:
            if path.is_dir():
                continue
            if not path.resolve().is_relative_to(real_root):
                raise InputError(f"{path} lies outside {root} (a link leading elsewhere); a parquet-dataset reads "
                                 "only files inside the folder it names", where=where(src))
            check_file(src, path)
            files.append((path.relative_to(root).as_posix(), path))
        if not files:
            raise InputError(f"{src.path} names no Parquet file", where=where(src))
        return sorted(files)

    def files(self, src: SourceSpec) -> list[Path]:
        try:
            return [path for _, path in self.listing(src)]
        except InputError:  # reading the source says what is wrong, where the run reports it
            return []


    def check_files(self, src: SourceSpec) -> None:
        self.listing(src)

    def content_hash(self, src: SourceSpec) -> str:
        digest = hashlib.sha256()
        for rel, path in self.listing(src):
            digest.update(f"{rel}\0{sha256_of(src, path)}\n".encode())
        return digest.hexdigest()

    def read_expr(self, src: SourceSpec, whole: bool = True, types: dict[str, str] | None = None
                  ) -> tuple[str, list[Any]]:
        return "SELECT * FROM read_parquet(?)", [[duckdb_file(path) for _, path in self.listing(src)]]


SOURCE = ParquetDatasetSource()
