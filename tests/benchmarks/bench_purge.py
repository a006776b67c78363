"""``anonflow purge`` on a store holding a scaled Adult, next to what its parts cost alone.

Run as a script::

    python tests/benchmarks/bench_purge.py [--records 1000000] [--work DIR] [--keep]

1. ``make_scaled.py N 1 --source arx`` writes ARX's Adult scaled to N records
   (``WORK/adult-arx-N-1.csv``; reused when there), and ``arx-adult-k5.yaml`` is run on it
   (its hierarchy files copied beside it) into ``WORK/s.duckdb``: the store then holds the
   source (N records), the typed table and the lattice's output.
2. Each in a subprocess (peak RSS: the subprocess's own ``ru_maxrss``), on a fresh copy of
   that store:
   * ``cp`` of the store file (the I/O floor: writing the whole file once);
   * DuckDB alone: ``COPY FROM DATABASE`` of the store into a fresh file (what the rewrite
     costs without anonflow's bookkeeping);
   * ``anonflow purge --all`` (drop, rewrite, zero the old file, record the purge).
   Prints seconds, the store's size before and after, and peak RSS.

Prints figures only; nothing is asserted (timings depend on the machine: give ``uptime``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
mode, db = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if mode == "duckdb":
    import duckdb
    con = duckdb.connect(db)
    con.execute("ATTACH '" + db + ".copy' AS fresh")
    con.execute("COPY FROM DATABASE " + con.execute("SELECT current_database()").fetchone()[0] + " TO fresh")
    con.execute("DETACH fresh")
    con.close()
else:
    from anonflow.cli import main
    try:
        main(["purge", "--db", db, "--all", "--json"], standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def mib(path: Path) -> float:
    return path.stat().st_size / 2**20


def main(argv: list[str]) -> None:
    records = int(argv[argv.index("--records") + 1]) if "--records" in argv else 1_000_000
    work = Path(argv[argv.index("--work") + 1]) if "--work" in argv else Path(tempfile.mkdtemp(prefix="bench-purge-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data" / "arx"
    data.mkdir(parents=True, exist_ok=True)
    for f in (ROOT / "workflows" / "data" / "arx").glob("adult_hierarchy_*.csv"):
        shutil.copy(f, data / f.name)
    csv = data / "adult.csv"
    if not csv.exists():
        subprocess.run([sys.executable, str(HERE / "make_scaled.py"), str(records), "1", "--source", "arx",
                        "--out", str(csv)], check=True)
    wf = work / "wf.yaml"
    wf.write_text((ROOT / "workflows" / "arx-adult-k5.yaml").read_text())
    store = work / "s.duckdb"
    if not store.exists():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "anonflow", "run", str(wf), "--db", str(store), "--out-dir",
                        str(work / "out"), "--json"], check=True, stdout=subprocess.DEVNULL)
        print(f"run arx-adult-k5 on {records:,} records: {time.perf_counter() - t0:.1f} s, store {mib(store):.1f} MiB")
    print(f"uptime: {os.popen('uptime').read().strip()}")
    for mode in ("cp", "duckdb", "anonflow"):
        copy = work / f"{mode}.duckdb"
        shutil.copy(store, copy)
        if mode == "cp":
            t0 = time.perf_counter()
            subprocess.run(["cp", str(copy), str(copy) + ".copy"], check=True)
            rec = {"seconds": time.perf_counter() - t0, "rss_mib": float("nan")}
        else:
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(copy)], check=True, capture_output=True,
                                 text=True, cwd=ROOT)
            rec = json.loads(out.stdout.strip().splitlines()[-1])
        after = Path(str(copy) + ".copy") if mode != "anonflow" else copy
        print(f"{mode:<9} {rec['seconds']:7.2f} s  store {mib(store):8.1f} MiB -> {mib(after):8.1f} MiB  "
              f"peak RSS {rec['rss_mib']:7.1f} MiB")
        for p in (copy, Path(str(copy) + ".copy")):
            p.unlink(missing_ok=True)
    if "--keep" not in argv:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
