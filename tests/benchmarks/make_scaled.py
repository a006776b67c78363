"""A scaled Adult for scale benchmarks: N records resampled from a shipped Adult file, integer
columns jittered within their own range, written in bounded memory and byte-identical for the
same N, SEED and source::

    python tests/benchmarks/make_scaled.py N SEED [--source arx|full|PATH] [--out FILE]

* ``--source arx`` (default): ARX's Adult (``workflows/data/arx/adult.csv``, 30,162 records,
  ``;``-separated; the lattice workflow ``arx-adult-k5.yaml`` reads it);
  ``full``: seed 004's Adult (``workflows/data/adult/adult_full.csv``, 45,222 records, 6
  integer columns; ``adult-mdav.yaml`` and ``gca-adult.yaml`` read it); or any CSV file.
* Records are drawn uniformly with replacement (numpy's PCG64 seeded with SEED). Each integer
  column gets a uniform jitter in ``[-w, w]``, ``w = max(1, round(1 % of its range))``, clipped
  to the column's ``[min, max]`` in the source, so every value stays inside the hierarchies
  built for the source. Text columns are copied as drawn.
* ``--out FILE`` (default ``adult-<source>-<N>-<SEED>.csv`` in the current folder): ``.csv``
  keeps the source's delimiter (a workflow's ``delimiter:`` still applies) and, like the
  source, quotes nothing (a value that would need quoting is an error), ``.parquet`` writes
  Parquet. The file is written in chunks of 1,000,000 records (memory stays about one chunk)
  to a temporary name and renamed into place; an existing file is not overwritten.

Prints the records written, the seconds taken and the file's sha256. Importing this module has
no side effects.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"arx": ROOT / "workflows" / "data" / "arx" / "adult.csv",
           "full": ROOT / "workflows" / "data" / "adult" / "adult_full.csv"}
CHUNK = 1_000_000  # fixed: the output depends on it (the draws are made chunk by chunk)


def read_source(path: Path) -> tuple[pa.Table, str]:
    """The source table (text kept as text) and its delimiter (``;`` if the header has one)."""
    with open(path, encoding="utf-8") as fh:
        header = fh.readline()
    delimiter = ";" if ";" in header else ","
    table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter))
    return table, delimiter


def scaled_chunks(source: pa.Table, n: int, seed: int):
    """Yield the N scaled records as Arrow tables of at most CHUNK records."""
    rng = np.random.default_rng(seed)
    ints = [c for c in source.column_names if pa.types.is_integer(source.schema.field(c).type)]
    bounds = {}
    for c in ints:
        mm = pc.min_max(source.column(c))
        lo, hi = int(mm["min"].as_py()), int(mm["max"].as_py())
        bounds[c] = (lo, hi, max(1, round(0.01 * (hi - lo))))
    done = 0
    while done < n:
        m = min(CHUNK, n - done)
        chunk = source.take(pa.array(rng.integers(0, source.num_rows, m)))
        for c in ints:
            lo, hi, w = bounds[c]
            x = chunk.column(c).to_numpy() + rng.integers(-w, w + 1, m)
            chunk = chunk.set_column(chunk.column_names.index(c), c,
                                     pa.array(np.clip(x, lo, hi), chunk.schema.field(c).type))
        done += m
        yield chunk


def write(source: pa.Table, delimiter: str, n: int, seed: int, out: Path) -> str:
    """Write the scaled table to ``out`` (via a temporary file renamed into place); return its sha256."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        if out.suffix == ".parquet":
            with pq.ParquetWriter(tmp, source.schema) as w:
                for chunk in scaled_chunks(source, n, seed):
                    w.write_table(chunk)
        else:
            # the header as the source has it (pyarrow would quote the names), then the records
            options = pacsv.WriteOptions(delimiter=delimiter, quoting_style="none", include_header=False)
            with open(tmp, "wb") as fh:
                fh.write((delimiter.join(source.column_names) + "\n").encode())
                with pacsv.CSVWriter(fh, source.schema, write_options=options) as w:
                    for chunk in scaled_chunks(source, n, seed):
                        w.write_table(chunk)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    h = hashlib.sha256()
    with open(out, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv: list[str]) -> int:
    args = list(argv)
    opts = {}
    for name in ("--source", "--out"):
        if name in args:
            i = args.index(name)
            if i + 1 >= len(args):
                raise SystemExit(f"make_scaled: {name} needs a value")
            opts[name] = args[i + 1]
            del args[i: i + 2]
    if len(args) != 2 or not all(a.isdigit() for a in args) or int(args[0]) < 1:
        raise SystemExit(__doc__)
    n, seed = int(args[0]), int(args[1])
    name = opts.get("--source", "arx")
    path = SOURCES.get(name, Path(name))
    if not path.is_file():
        raise SystemExit(f"make_scaled: source {name!r}: no such file {path}")
    out = Path(opts.get("--out", f"adult-{Path(name).stem if name not in SOURCES else name}-{n}-{seed}.csv"))
    if out.suffix not in (".csv", ".parquet"):
        raise SystemExit(f"make_scaled: --out {out}: expected a .csv or .parquet file name")
    if out.exists():
        raise SystemExit(f"make_scaled: {out} exists; remove it or choose another --out")
    t0 = time.perf_counter()
    source, delimiter = read_source(path)
    digest = write(source, delimiter, n, seed, out)
    print(f"{out}: {n} records from {path.name} ({source.num_rows} records), seed {seed}, "
          f"{time.perf_counter() - t0:.1f} s, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
