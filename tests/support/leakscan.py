"""Test support: scan released files (or any bytes: a DuckDB store file, say) for original
records and for original values that must not be there.

The claim under test (issue 19): the release and the report never contain an original record,
nor an original value of a quasi-identifier or sensitive attribute that the published table does
not contain; the values of the columns the typing drops (identifiers, and undeclared columns
under ``others: drop``) appear nowhere. Hierarchies, gradings and the workflow text are domain
metadata, not records: a value they hold may appear anywhere.

Which values are looked for (:func:`distinctive_values`)
    Only *distinctive* ones, long enough that finding one in a file is not chance: a cell's text
    (as in the source file, stripped) that is a number-like string (digits with ``. - + / :``)
    with at least :data:`MIN_DIGITS` digits, or any other string of at least :data:`MIN_CHARS`
    characters holding a letter or digit. Missing markers (``?``, empty, ``NA``, ``NULL``...)
    never count. ``39``, ``2174``, ``Male`` are not distinctive; ``77516``, ``-18931``,
    ``183523.8``, ``White``, ``Never-married`` and ``<=50K`` are. What a reader may legitimately
    see (the published table's values, the hierarchy labels) is taken out by the caller
    (``allowed``).

How a value is found (:func:`scan`)
    The bytes are cut once into *tokens* (:data:`TOKEN`): runs of ASCII letters, digits and
    ``_``, a number keeping its decimal part (``12345.5`` is one token) and its minus sign when
    the ``-`` does not follow a word character (``-18931``; but ``10000-19999`` is ``10000``,
    ``19999``); words joined by a hyphen between two letters are one token (``Other-service``,
    so ``Other`` is not found in it). The common HTML character references (``&lt;``,
    ``&amp;``, ``&#39;``) are separators, so an escaped value is found as the plain one.
    Numbers are compared as written, except that a trailing ``.0...`` is dropped (``12345.0``
    is ``12345``) and a negative number also stands for its absolute value. So ``12345`` is found in ``a 12345,`` and in ``"12345.0"`` and in
    ``-12345``, never inside ``112345``, ``12345.5``, ``0.12345`` or ``abc_12345``; ``Male`` is
    never found inside ``Female``. Comparison is case-sensitive, on UTF-8 bytes (a store file
    is read as raw bytes; DuckDB's compressed segments hide what they compress, so a scan of a
    store file sees only what it keeps in plain bytes).

    A value that is one token is looked up in the set of the data's tokens. A value of several
    tokens (``Self-emp-not-inc``, ``Alaska Electric Light&Power Co``) must appear as the same
    tokens in a row, then (``exact``, the default) as the same bytes, bounded by non-word
    characters, in the data or in its HTML-unescaped text. A record (:func:`original_rows`)
    is looked for with ``exact=False``: its fields in order with any separators between them
    (``39,State-gov,...``, ``39;State-gov``, ``<td>39</td><td>State-gov</td>``: in a sequence,
    HTML tags are separators too).

    One pass of a compiled regex over the bytes, in chunks; about a second per 10 MB.

:func:`release_leaks` applies all this to a shipped workflow's output folder.
"""

from __future__ import annotations

import csv
import functools
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import yaml

#: a number-like string is distinctive from this many digits on (a count of records, a year or
#: an age is not; a 5-digit amount or weight is)
MIN_DIGITS = 5
#: any other string is distinctive from this many characters on (``Male``, ``Wife`` are not)
MIN_CHARS = 5
#: cells that are missing, not values
MISSING = frozenset({"", "?", "NA", "N/A", "NULL", "null", "None", "nan", "NaN"})
#: a record is looked for when its fields make at least this many tokens, of at least
#: MIN_ROW_CHARS characters together (``39,1,2`` could be any three numbers of a table)
MIN_ROW_TOKENS = 3
MIN_ROW_CHARS = 10

#: a token: an HTML character reference (a separator, dropped: the common ones only, so that
#: ``Trinadad&Tobago;`` in a ``;``-separated file stays two words), or a run of word characters
#: with an optional decimal part and, not after a word character, a minus sign, its words joined
#: by hyphens between letters (``Self-emp-not-inc``: ``Other`` is not found in ``Other-service``)
TOKEN = re.compile(rb"&(?:lt|gt|amp|quot|apos|nbsp|#[0-9]+|#[xX][0-9A-Fa-f]+);"
                   rb"|(?:(?<![A-Za-z0-9_])-)?[A-Za-z0-9_]+(?:\.[0-9]+)?"
                   rb"(?:(?<=[A-Za-z])-(?=[A-Za-z])[A-Za-z0-9_]+)*")
#: for records: a token, or an HTML/XML tag (a separator, dropped: cells ``<td>39</td><td>...``)
SEQ_TOKEN = re.compile(rb"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]{0,500})?/?>|" + TOKEN.pattern)
_NUMBERLIKE = re.compile(r"[-+]?[0-9][0-9.\-+/:]*")
_WORDCHAR = re.compile(r"[A-Za-z0-9]")
_TRAILING_ZEROS = re.compile(rb"^(-?[0-9]+)\.0+$")
_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGITS = frozenset(b"0123456789")
#: bytes after which a chunk may be cut (none of them is part of a token)
_CUTS = (b"\n", b" ", b",", b"\x00")
CHUNK = 8 << 20


# -- values --------------------------------------------------------------------------------


def is_distinctive(text: str) -> bool:
    """Whether a cell's (stripped) text is long enough that finding it is not chance (the
    module's rule)."""
    if text in MISSING or not _WORDCHAR.search(text):
        return False
    if _NUMBERLIKE.fullmatch(text):
        return sum(ch.isdigit() for ch in text) >= MIN_DIGITS
    return len(text) >= MIN_CHARS


def _cells(original: pa.Table, column: str) -> Iterator[str]:
    col = original.column(column)
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.string())
    for v in pc.unique(col).to_pylist():
        if v is not None:
            yield v.strip()


def distinctive_values(original: pa.Table, columns: Iterable[str], *, allowed: Iterable[str] = ()) -> set[str]:
    """The distinctive texts (:func:`is_distinctive`) of the cells of ``columns`` of
    ``original`` (read as text: :func:`read_source`), less ``allowed``."""
    allowed = set(allowed)
    return {v for c in columns for v in _cells(original, c) if is_distinctive(v) and v not in allowed}


def original_rows(original: pa.Table, columns: list[str]) -> set[str]:
    """Each record's cells of ``columns`` (in that order) joined by ``,`` as a CSV line shows
    them (no quoting), for records of at least :data:`MIN_ROW_TOKENS` tokens and
    :data:`MIN_ROW_CHARS` characters in them."""
    cols = [pc.cast(original.column(c), pa.string()).to_pylist() for c in columns]
    rows = {",".join("" if v is None else v.strip() for v in cells) for cells in zip(*cols)}
    return {r for r in rows if len(t := _value_tokens(r)) >= MIN_ROW_TOKENS and sum(map(len, t)) >= MIN_ROW_CHARS}


def read_source(path: Path, *, delimiter: str = ",", header: bool = True, quote: str = '"',
                fmt: str | None = None) -> pa.Table:
    """A source file with every column as text, as written in the file (CSV), or cast to text
    (Parquet). Column names as DuckDB gives them (``column0``... without a header)."""
    path = Path(path)
    if (fmt or path.suffix.lstrip(".")) == "parquet":
        t = pq.read_table(path)
        return pa.table({n: pc.cast(t.column(n), pa.string()) for n in t.column_names})
    with open(path, newline="", encoding="utf-8-sig") as fh:
        first = next(csv.reader(fh, delimiter=delimiter, quotechar=quote))
    names = first if header else [f"column{i:0{len(str(len(first) - 1))}d}" for i in range(len(first))]
    return pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1 if header else 0),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=quote),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                             strings_can_be_null=False, quoted_strings_can_be_null=False))


# -- tokens --------------------------------------------------------------------------------


def _norm(tok: bytes) -> bytes | None:
    """A raw token as compared: None for a character reference, ``12345.0`` as ``12345``."""
    if tok[0] in (38, 60):  # '&', '<'
        return None
    m = _TRAILING_ZEROS.match(tok)
    return m.group(1) if m else tok


@functools.lru_cache(maxsize=1 << 19)  # the same values are scanned for in every file of a release
def _value_tokens(value: str) -> tuple[bytes, ...]:
    return tuple(n for t in TOKEN.findall(value.encode()) if (n := _norm(t)) is not None)


def _chunks(data: bytes, size: int | None = None) -> Iterator[bytes]:
    """``data`` in pieces of about ``size`` bytes (:data:`CHUNK`), each cut after a byte no
    token holds (where there is one), so that no token is split."""
    size = size or CHUNK
    start, n = 0, len(data)
    while start < n:
        end = min(start + size, n)
        if end < n:
            cut = max(data.rfind(c, start, end) for c in _CUTS)
            if cut > start:
                end = cut + 1
        yield data[start:end]
        start = end


@functools.lru_cache(maxsize=4)  # a release's tables and metadata are scanned for several value sets
def token_set(data: bytes) -> frozenset[bytes]:
    """Every token of ``data`` as compared (a negative number also without its sign)."""
    raw: set[bytes] = set()
    for chunk in _chunks(data):
        raw.update(TOKEN.findall(chunk))
    out: set[bytes] = set()
    for t in raw:
        n = _norm(t)
        if n is not None:
            out.add(n)
            if n[:1] == b"-":
                out.add(n[1:])
    return frozenset(out)


@functools.lru_cache(maxsize=4)
def _token_lists(data: bytes) -> tuple[list[bytes], ...]:
    """``data``'s token stream (:data:`SEQ_TOKEN`), one list per chunk; read, never changed."""
    lists = []
    for chunk in _chunks(data):
        raw = SEQ_TOKEN.findall(chunk)
        norm = {t: _norm(t) for t in set(raw)}
        lists.append([n for t in raw if (n := norm[t]) is not None])
    return tuple(lists)


def _exact_in(data: bytes, value: bytes) -> bool:
    """Whether ``value`` occurs in ``data`` not as part of a longer word or number."""
    n, at = len(data), data.find(value)
    first, last = value[0], value[-1]
    while at >= 0:
        end = at + len(value)
        before = data[at - 1] if at else None
        after = data[end] if end < n else None
        ok = not (first in _WORD_BYTES and before is not None and before in _WORD_BYTES)
        ok = ok and not (first in _DIGITS and before == 46 and at > 1 and data[at - 2] in _DIGITS)  # x.<value>
        ok = ok and not (last in _WORD_BYTES and after is not None and after in _WORD_BYTES)
        ok = ok and not (last in _DIGITS and after == 46 and end + 1 < n and data[end + 1] in _DIGITS)
        if ok:
            return True
        at = data.find(value, at + 1)
    return False


def scan(data: bytes, values: Iterable[str], *, exact: bool = True) -> set[str]:
    """The ``values`` found in ``data`` as whole tokens (see the module's docstring): a
    one-token value in the data's token set; a value of several tokens as the same tokens in a
    row, and with ``exact`` as the same bytes (in the data or its HTML-unescaped text)."""
    single: dict[bytes, list[str]] = {}
    multi: dict[tuple[bytes, ...], list[str]] = {}
    for v in values:
        toks = _value_tokens(v)
        if len(toks) == 1:
            single.setdefault(toks[0], []).append(v)
        elif toks:
            multi.setdefault(toks, []).append(v)
    found: set[str] = set()
    if single:
        have = token_set(data)
        found.update(v for t, vs in single.items() if t in have for v in vs)
    if multi:
        found.update(v for vs in _find_sequences(data, multi) for v in vs)
    if exact:
        unescaped: list[bytes] = []

        def exactly(v: str) -> bool:
            vb = v.encode()
            if vb == _value_tokens(v)[0] or _exact_in(data, vb):  # a one-token value as written
                return True
            if not unescaped:
                text = data.decode("utf-8", "surrogateescape")
                unescaped.append(html.unescape(text).encode("utf-8", "surrogateescape") if "&" in text else b"")
            return bool(unescaped[0]) and _exact_in(unescaped[0], vb)

        found = {v for v in found if exactly(v)}
    return found


def _find_sequences(data: bytes, seqs: Mapping[tuple[bytes, ...], list[str]]) -> Iterator[list[str]]:
    """The entries of ``seqs`` (token tuples of two or more) that occur in ``data``'s token
    stream as consecutive tokens."""
    by_prefix: dict[tuple[bytes, ...], list[tuple[bytes, ...]]] = {}
    for s in seqs:
        by_prefix.setdefault(s[:3], []).append(s)
    firsts = {s[0] for s in seqs}
    widths = sorted({len(p) for p in by_prefix})
    longest = max(len(s) for s in seqs)
    seen: set[tuple[bytes, ...]] = set()
    tail: list[bytes] = []
    for toks in _token_lists(data):
        toks = tail + toks
        n = len(toks)
        for i, t in enumerate(toks):
            if t not in firsts:
                continue
            for w in widths:
                for s in by_prefix.get(tuple(toks[i:i + w]), ()):
                    if s not in seen and i + len(s) <= n and tuple(toks[i:i + len(s)]) == s:
                        seen.add(s)
                        yield seqs[s]
        tail = toks[max(0, n - longest + 1):]


# -- files -----------------------------------------------------------------------------------


def render(path: Path) -> tuple[bytes, bytes]:
    """A published data file's (table text, other text): a CSV file's bytes and nothing; a
    Parquet file's table as CSV (nested cells as JSON) and its key-value metadata."""
    path = Path(path)
    if path.suffix != ".parquet":
        return path.read_bytes(), b""
    t = pq.read_table(path)
    cols = {}
    for f in t.schema:
        col = t.column(f.name)
        if pa.types.is_dictionary(f.type):
            col = col.cast(f.type.value_type)
        if pa.types.is_nested(col.type):
            col = pa.array([None if v is None else json.dumps(v) for v in col.to_pylist()], pa.string())
        cols[f.name] = col
    buf = io.BytesIO()
    pacsv.write_csv(pa.table(cols), buf)
    meta = [k + b"\n" + v for k, v in (t.schema.metadata or {}).items()]
    meta += [k + b"\n" + v for f in t.schema for k, v in (f.metadata or {}).items()]
    return buf.getvalue(), b"\n".join(meta)


def scan_release(files: Iterable[Path], original: pa.Table, columns: list[str], published: Iterable[str] = (),
                 *, rows: list[str] | None = None) -> dict[Path, set[str]]:
    """What of ``original`` each file holds: its distinctive values of ``columns`` less
    ``published`` (:func:`scan`), and, with ``rows`` (columns), its records of those columns
    (:func:`original_rows`, ``exact=False``). Files with nothing are left out."""
    values = distinctive_values(original, columns, allowed=published)
    records = original_rows(original, rows) if rows else set()
    out: dict[Path, set[str]] = {}
    for path in files:
        data = Path(path).read_bytes()
        hit = scan(data, values) | (scan(data, records, exact=False) if records else set())
        if hit:
            out[Path(path)] = hit
    return out


# -- a shipped workflow's output folder -----------------------------------------------------


def role_names(value: Any) -> list[str]:
    """The column names a typing role lists (a name, a list, a mapping of name -> type, or a
    list of such mappings)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return list(value)
    return [next(iter(v)) if isinstance(v, Mapping) else v for v in value]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


@dataclass
class Roles:
    """A workflow's typing, read from its file: the source it types and its columns by fate."""

    source: dict[str, Any]
    rows: list[str]                       # quasi-identifiers and sensitive, in source order
    kept: list[str]                       # every column the typing keeps
    dropped: list[str]                    # identifiers, and undeclared columns under others: drop
    missing: set[str] = field(default_factory=set)


def workflow_roles(spec: Mapping[str, Any], columns: list[str] | None = None,
                   wf_dir: Path | None = None) -> Roles:
    """The typing step's roles (the first ``uses: typing`` step), its source (followed back
    through the steps' inputs) and, given the source's ``columns``, the kept and dropped ones
    (as the typing step decides: anonflow/builtins.py, ``Typing.run``)."""
    steps = spec["steps"]
    name, typing = next((n, s) for n, s in steps.items() if s.get("uses") == "typing")
    src = typing["input"]
    while src in steps:
        src = steps[src]["input"]
        src = src[0] if isinstance(src, list) else src
    source = dict(spec["sources"][src])
    if wf_dir is not None and "path" in source:
        source["path"] = Path(wf_dir) / source["path"]
    params = typing.get("with") or {}
    roles = {c: role for role in ("quasi", "sensitive", "label", "insensitive", "identifier", "weight")
             for c in role_names(params.get(role))}
    if columns is None:
        columns = list(roles)
    others = params.get("others", "drop")
    kept = [c for c in columns if roles.get(c, "insensitive" if others == "insensitive" else "dropped")
            not in ("identifier", "dropped")]
    return Roles(source=source, rows=[c for c in columns if roles.get(c) in ("quasi", "sensitive")], kept=kept,
                 dropped=[c for c in columns if c not in kept],
                 missing={str(v) for v in params.get("missing_values") or []})


def _referenced_files(spec: Mapping[str, Any], wf_dir: Path) -> list[Path]:
    """Files a workflow's steps name (hierarchies, gradings): domain metadata."""
    out = []
    for step in spec["steps"].values():
        for s in _strings(step.get("with") or {}):
            if "/" in s or "." in s:
                p = wf_dir / s
                if len(s) < 300 and p.is_file() and p not in out:
                    out.append(p)
    return out


@dataclass
class Findings:
    """What :func:`release_leaks` looked for and found."""

    checked: int = 0              # distinctive original values of kept columns not published
    dropped: int = 0              # distinctive values of dropped columns
    rows: int = 0                 # original records looked for
    files: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.files} files; {self.checked} unpublished kept values, {self.dropped} dropped-column "
                f"values, {self.rows} records looked for; {len(self.problems)} problems")


def _shown(values: set[str], n: int = 5) -> str:
    return f"{len(values)}, e.g. {sorted(values)[:n]}"


def release_leaks(workflow: Path, out_dir: Path) -> Findings:
    """Scan every file under ``out_dir``, a run of ``workflow``'s outputs, for what must not be
    there:

    (a) in a file other than a published data file (``*.csv``, ``*.parquet``: their table;
        a Parquet file's metadata counts as another file): a distinctive original value of a
        kept column (quasi-identifier, sensitive, label, weight, insensitive) that neither the
        published tables nor the domain metadata (the workflow file and the files its steps
        name: hierarchies, gradings) hold;
    (b) in any file at all: a distinctive value of a dropped column (identifier, undeclared
        under ``others: drop``), unless a kept column's original values or the domain metadata
        hold it too (then finding it says nothing about the dropped column);
    (c) in a file other than a published data file: an original record (its quasi-identifiers
        and sensitive attributes in source order, any separators), unless a published table
        holds it.
    """
    workflow, out_dir = Path(workflow), Path(out_dir)
    spec = yaml.safe_load(workflow.read_text())
    roles = workflow_roles(spec, wf_dir=workflow.parent)
    src = roles.source
    original = read_source(src["path"], delimiter=src.get("delimiter", ","), header=src.get("header", True),
                           quote=src.get("quote", '"'), fmt=src.get("format"))
    roles = workflow_roles(spec, original.column_names, workflow.parent)
    missing = MISSING | roles.missing | {str(v) for v in src.get("na_values") or []}
    meta = b"\n".join([workflow.read_bytes(), *(p.read_bytes() for p in _referenced_files(spec, workflow.parent))])

    def distinct(columns: list[str]) -> set[str]:
        return {v for v in distinctive_values(original, columns) if v not in missing}

    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    data = [p for p in files if p.suffix in (".csv", ".parquet")]
    tables = {p: render(p) for p in data}
    published = b"\n".join(t for t, _ in tables.values())

    kept_values = distinct(roles.kept)
    allowed = scan(published, kept_values) | scan(meta, kept_values)
    unpublished = kept_values - allowed
    kept_all = {v for v in (x for c in roles.kept for x in _cells(original, c))}
    dropped_values = distinct(roles.dropped) - kept_all
    dropped_values -= scan(meta, dropped_values)
    records = original_rows(original, roles.rows)
    records -= scan(published, records, exact=False) | scan(meta, records, exact=False)

    found = Findings(checked=len(unpublished), dropped=len(dropped_values), rows=len(records), files=len(files))
    for p in files:
        rel = p.relative_to(out_dir)
        texts = [(tables[p][1], f"{rel} (metadata)")] if p in tables else [(p.read_bytes(), str(rel))]
        if p in tables:
            hit = scan(tables[p][0], dropped_values)
            if hit:
                found.problems.append(f"{rel}: values of dropped columns {roles.dropped}: {_shown(hit)}")
        for text, where in texts:
            if not text:
                continue
            hit = scan(text, unpublished)
            if hit:
                found.problems.append(f"{where}: original values the published tables do not hold: {_shown(hit)}")
            hit = scan(text, dropped_values)
            if hit:
                found.problems.append(f"{where}: values of dropped columns {roles.dropped}: {_shown(hit)}")
            hit = scan(text, records, exact=False)
            if hit:
                found.problems.append(f"{where}: original records ({','.join(roles.rows)}): {_shown(hit, 3)}")
    return found


def assert_release_leaks_nothing(workflow: Path, out_dir: Path) -> Findings:
    """:func:`release_leaks`, failing with every problem found; the findings otherwise."""
    found = release_leaks(workflow, out_dir)
    assert not found.problems, f"{Path(workflow).name}: " + "\n".join(found.problems)
    return found


# -- a store after a purge -------------------------------------------------------------------

def store_leaks(workflow: Path, db: Path, out_dir: Path) -> tuple[int, set[str]]:
    """The distinctive original values (of every source column) that the published data files
    under ``out_dir`` do not hold, and those of them found in the bytes of the store ``db``
    (and its write-ahead log) -- after ``retain: published`` or ``anonflow purge``, none should
    be. Allowed besides the published tables: the domain metadata (the workflow file, which the
    store records, and the files its steps name) and the run ids (a time such as ``214415``).
    DuckDB compresses numbers, so a scan of a store file sees mainly text values. Returns
    (how many values were looked for, those found)."""
    import duckdb

    workflow, db = Path(workflow), Path(db)
    spec = yaml.safe_load(workflow.read_text())
    src = workflow_roles(spec, wf_dir=workflow.parent).source
    original = read_source(src["path"], delimiter=src.get("delimiter", ","), header=src.get("header", True),
                           quote=src.get("quote", '"'), fmt=src.get("format"))
    values = distinctive_values(original, original.column_names)
    published = b"\n".join(render(p)[0] for p in sorted(Path(out_dir).rglob("*")) if p.suffix in (".csv", ".parquet"))
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = "\n".join(r[0] for r in con.execute("SELECT run_id FROM af_runs").fetchall()).encode()
    finally:
        con.close()
    meta = b"\n".join([workflow.read_bytes(), runs,
                       *(p.read_bytes() for p in _referenced_files(spec, workflow.parent))])
    looked = values - scan(published, values) - scan(meta, values)
    data = db.read_bytes()
    wal = db.with_name(db.name + ".wal")
    if wal.exists():
        data += b"\n" + wal.read_bytes()
    return len(looked), scan(data, looked)
