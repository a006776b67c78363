"""The ``csv`` source: a delimited text file, read by DuckDB (its sniffer, checked: a column
sniffed on a sample is never silently rounded; a header names every column once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from ..errors import InputError
from ..sandbox import duckdb_file, ident
from ..sourcekind import SourceSpec
from ._base import FileSource, check_file, where

#: DuckDB's integer types (its CSV sniffer picks BIGINT)
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT")


class CsvSource(FileSource):
    name = "csv"
    description = "a CSV file (delimiter, header, quote, na_values and types as options)"
    extensions = (".csv", ".tsv", ".txt")

    def no_records(self, src: SourceSpec) -> str:
        return f"{src.path} has a header but no records"

    def check_files(self, src: SourceSpec) -> None:
        check_file(src)
        if _only_blank(src.path):
            raise InputError(f"{src.path} holds only blank lines: no header and no records", where=where(src))

    def read_expr(self, src: SourceSpec, whole: bool = True, types: dict[str, str] | None = None
                  ) -> tuple[str, list[Any]]:
        """SQL (and its parameters) that reads the file. Column types are sniffed on the whole
        file (``whole``: no late surprise, no value silently rounded to a type sniffed on a
        sample) or, for planning, which needs only the column names, on DuckDB's sample."""
        opts = src.options
        args = ["sample_size = -1"] if whole else []
        params: list[Any] = [duckdb_file(src.path)]
        if "delimiter" in opts:
            args.append("delim = ?")
            params.append(str(opts["delimiter"]))
        if "header" in opts:
            args.append("header = ?")
            params.append(bool(opts["header"]))
        if "quote" in opts:
            args.append("quote = ?")
            params.append(str(opts["quote"]))
        if "na_values" in opts:
            args.append("nullstr = ?")
            params.append([str(v) for v in opts["na_values"]])
        given = {str(k): str(v) for k, v in (opts.get("types") or {}).items()}
        if given or types:
            args.append("types = ?")
            params.append({**(types or {}), **given})
        return f"SELECT * FROM read_csv({', '.join(['?', *args])})", params

    def check_read(self, con: Any, src: SourceSpec, names: list[str]) -> None:
        """A CSV header must name every column once: DuckDB would silently rename a repeated
        name (``age``, ``age_1``; names compare case-insensitively) and call an empty one
        ``column<i>``. ``names`` are the columns DuckDB read; the header is read raw to compare."""
        if src.options.get("header") is False:
            return
        args, params = ["header = false", "all_varchar = true"], [duckdb_file(src.path)]
        for key, opt in (("delimiter", "delim"), ("quote", "quote")):
            if key in src.options:
                args.append(f"{opt} = ?")
                params.append(str(src.options[key]))
        try:
            row = con.execute(f"SELECT * FROM read_csv(?, {', '.join(args)}) LIMIT 1", params).fetchone()
        except duckdb.Error:
            return  # the real read reports the problem
        if row is None or len(row) != len(names):
            return
        raw = [None if v is None else str(v).lstrip("\ufeff") for v in row]
        seen: dict[str, int] = {}
        firsts = []
        for i, v in enumerate(raw):
            if v is not None and v.strip().casefold() not in seen:
                seen[v.strip().casefold()] = i
                firsts.append(i)
        if not all(names[i].strip() == str(raw[i]).strip() for i in firsts):
            return  # the first line is a record, not a header
        for i, v in enumerate(raw):
            if v is None or not v.strip():
                raise InputError(f"the header of {src.path} has no name for column {i + 1}; name every column",
                                 where=where(src))
            j = seen[v.strip().casefold()]
            if j != i:
                also = "" if raw[j].strip() == v.strip() else f" (as {v.strip()!r}: names ignore case)"
                raise InputError(f"the header of {src.path} names column {raw[j].strip()!r} twice{also}, columns "
                                 f"{j + 1} and {i + 1}; rename one so that every column has its own name",
                                 where=where(src))

    def fill(self, src: SourceSpec, con: Any, table: str) -> dict[str, str]:
        """``CREATE TABLE table`` from the file, returning the columns the source's view must
        cast (name -> SQL type).

        Column types are sniffed by DuckDB on a sample, which alone would be unsafe: a later
        value that does not fit can be changed silently (DuckDB reads ``12.5`` in a column
        sniffed as integers as 13). So a column sniffed as integers is read as DOUBLE (exact for
        integers below 2^53, and any decimal is read as written) and cast back to BIGINT in the
        view only if every value is a whole number below 2^53; a later value that fits no sniffed
        type fails the read, which is then redone with types sniffed on the whole file."""
        casts = self._read_sampled(src, con, table)
        if not casts and not _exists(con, table):
            super().fill(src, con, table)
        return casts

    def _read_sampled(self, src: SourceSpec, con: Any, name: str) -> dict[str, str]:
        """The fast CSV read of :meth:`fill` (types sniffed on DuckDB's sample, integer
        columns read as DOUBLE): the casts the view needs. Leaves no table where the whole file
        must be sniffed instead: a value past the sample fits no sniffed type, or an integer
        column holds whole numbers of 2^53 or more (a column holding a fraction stays DOUBLE, as the
        whole-file sniff would type it)."""
        sql, params = self.read_expr(src, whole=False)
        sniffed = con.execute(f"DESCRIBE {sql}", params).fetchall()
        given = set(map(str, (src.options.get("types") or {})))
        wide = {c: "DOUBLE" for c, t, *_ in sniffed if t in _INTEGER_TYPES and c not in given}
        sql, params = self.read_expr(src, whole=False, types=wide)
        try:
            con.execute(f"CREATE TABLE {ident(name)} AS {sql}", params)
        except (duckdb.ConversionException, duckdb.InvalidInputException):
            con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
            return {}
        if not wide:
            return {}
        checks = ", ".join(f"bool_and({ident(c)} IS NULL OR {ident(c)} = trunc({ident(c)})), "
                           f"coalesce(max(abs({ident(c)})), 0) < 9007199254740992" for c in wide)
        got = con.execute(f"SELECT {checks} FROM {ident(name)}").fetchone()
        casts = {}
        for i, c in enumerate(wide):
            whole_numbers, exact = got[2 * i] is not False, bool(got[2 * i + 1])
            if whole_numbers and not exact:   # integers a DOUBLE cannot hold: sniff the whole file
                con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
                return {}
            if whole_numbers:
                casts[c] = "BIGINT"
        return casts


def _exists(con: Any, name: str) -> bool:
    return con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
                       "AND table_catalog = current_database()", [name]).fetchone()[0] > 0


def _only_blank(path: Path, block: int = 1 << 16) -> bool:
    """Whether a text file holds nothing but whitespace (and a UTF-8 byte order mark); reads
    until the first other byte, so a real file costs one block."""
    with open(path, "rb") as fh:
        first = True
        while True:
            chunk = fh.read(block)
            if not chunk:
                return True
            if first and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
            first = False
            if chunk.strip():
                return False


SOURCE = CsvSource()
