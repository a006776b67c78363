"""PostgreSQL source and ``postgres`` publisher on scaled Adult, next to PostgreSQL's own COPY.

Run as a script (PostgreSQL's ``initdb``/``pg_ctl`` and ``psql`` installed, the ``postgres``
extra: ``pip install '.[postgres]'``)::

    python tests/benchmarks/bench_postgres.py [--records 1000000] [--work DIR] [--keep]

1. ``make_scaled.py N 1 --source arx`` writes ARX's Adult scaled to N records
   (``WORK/adult-arx-N-1.csv``; reused when there).
2. A throw-away server (``tests/support/pgserver.py``); the file is loaded into ``public.adult``
   with its column types (``age INTEGER``, the rest ``TEXT``) by ``psql``'s ``\\copy ... FROM``:
   the *write baseline* (PostgreSQL's COPY FROM, text format).
3. Reading, each in a subprocess (peak RSS: the subprocess's own ``ru_maxrss``):
   * ``psql -c "COPY public.adult TO STDOUT" > /dev/null`` (the *read baseline*);
   * ADBC's ``fetch_arrow_table()`` of ``SELECT * FROM public.adult`` (the whole table as
     Arrow in memory: what the driver alone needs);
   * anonflow's source (``{postgres: URL, table: adult}``): ``Store.load_source`` into a
     fresh store file (Arrow batches streamed into DuckDB, the content hash computed).
4. Writing, each a whole ``anonflow run`` in a subprocess (source CSV -> typing -> publish):
   * ``csv`` publisher (reference: everything but PostgreSQL);
   * ``postgres`` publisher, streamed from the store (the default for a stored table);
   * ``postgres`` publisher with the table loaded whole (``Streamed.of`` disabled: the
     draft's behaviour), for the memory difference.
   Prints the publish step's seconds, the run's wall seconds and peak RSS.

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
sys.path.insert(0, str(ROOT))

CHILD = r"""
import atexit, json, os, resource, sys, time
from pathlib import Path
_print = print
def print(text):  # every result line carries the process's peak RSS (MiB)
    rec = json.loads(text)
    rec["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _print(json.dumps(rec))
mode, url, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
t0 = time.perf_counter()
if mode == "read-adbc":
    from adbc_driver_postgresql import dbapi
    with dbapi.connect(url) as con:
        cur = con.cursor()
        cur.execute("SELECT * FROM public.adult")
        n = cur.fetch_arrow_table().num_rows
        cur.close()
    print(json.dumps({"rows": n, "seconds": time.perf_counter() - t0}))
elif mode == "read-anonflow":
    from anonflow.sources import load_source
    from anonflow.sourcekind import SourceSpec
    from anonflow.store import Store
    db = work / "read.duckdb"
    if db.exists():
        db.unlink()
    with Store(db) as store:
        art = load_source(store, SourceSpec("adult", "postgres", None, "adult", {"postgres": url}), run_id="b")
    db.unlink()
    print(json.dumps({"rows": art.rows, "seconds": time.perf_counter() - t0}))
else:  # write-<publisher>
    if mode == "write-loaded":
        from anonflow_std.publishing import postgres_publisher as pgpub
        pgpub.Streamed.of = classmethod(lambda cls, table, ctx: None)
    from click.testing import CliRunner
    from anonflow.cli import main
    wf = work / f"{mode}.yaml"
    for p in (work / f"{mode}.duckdb", ):
        if p.exists():
            p.unlink()
    shutil = __import__("shutil"); shutil.rmtree(work / f"out-{mode}", ignore_errors=True)
    res = CliRunner().invoke(main, ["run", str(wf), "--db", str(work / f"{mode}.duckdb"), "--out-dir",
                                    str(work / f"out-{mode}"), "--json", "--no-cache"], catch_exceptions=False)
    out = json.loads(res.stdout)
    steps = {s["step"]: s.get("seconds") for s in out["steps"]}
    print(json.dumps({"status": out["status"], "error": out.get("error"), "publish": steps.get("published"),
                      "seconds": time.perf_counter() - t0}))
"""

WORKFLOW = """\
name: bench-pg
sources:
  adult: {{path: {csv}, delimiter: ';'}}
steps:
  typed:
    uses: typing
    input: adult
    with:
      quasi: {{sex: nominal, age: continuous, race: nominal, marital-status: nominal}}
      sensitive: [salary-class]
      others: insensitive
  published:
    uses: publish
    input: typed
    with: {publish}
"""


def child(mode: str, url: str, work: Path, env: dict[str, str]) -> dict:
    """Run a CHILD mode in a subprocess: its JSON line, with wall seconds and peak RSS (MiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, url, str(work)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(ROOT))
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed: {err.decode()[-2000:]}")
    rec = json.loads(out.decode().strip().splitlines()[-1])
    rec["wall"] = wall
    return rec


def timed_shell(cmd: list[str], env: dict[str, str], stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of a command."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.read().decode()[-2000:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def main(argv: list[str]) -> int:
    from tests.support import pgserver

    n, work, keep = 1_000_000, Path(tempfile.gettempdir()) / "anonflow-bench-pg", False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--records":
            n = int(args.pop(0))
        elif a == "--work":
            work = Path(args.pop(0))
        elif a == "--keep":
            keep = True
        else:
            raise SystemExit(__doc__)
    work.mkdir(parents=True, exist_ok=True)
    csv = work / f"adult-arx-{n}-1.csv"
    if not csv.exists():
        subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/make_scaled.py"), str(n), "1", "--source", "arx",
                        "--out", str(csv)], check=True, stdout=subprocess.DEVNULL)
    psql = shutil.which("psql") or str(pgserver.find_bin() / "psql")
    print(f"records {n:,}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"{os.cpu_count()} CPUs")
    server = pgserver.start()
    try:
        env = {**os.environ, "PGPASSWORD": pgserver.PASSWORD, "PGPASSFILE": str(work / "no-pgpass")}
        url = server.url()
        with open(csv, encoding="utf-8") as fh:
            header = fh.readline().strip().split(";")
        cols = ", ".join(f'"{c}" {"INTEGER" if c == "age" else "TEXT"}' for c in header)
        subprocess.run([psql, "-X", "-q", url, "-c", f"CREATE TABLE public.adult ({cols})"], check=True, env=env)
        sec, rss = timed_shell([psql, "-X", "-q", url, "-c",
                                f"\\copy public.adult FROM '{csv}' WITH (FORMAT csv, HEADER true, DELIMITER ';')"], env)
        print(f"write  baseline psql \\copy FROM (csv)          {sec:7.2f} s   peak RSS {rss:7.0f} MiB (psql)")
        subprocess.run([psql, "-X", "-q", url, "-c", "VACUUM ANALYZE public.adult"], check=True, env=env)

        sec, rss = timed_shell([psql, "-X", "-q", url, "-c", "COPY public.adult TO STDOUT"], env)
        print(f"read   baseline psql COPY TO STDOUT             {sec:7.2f} s   peak RSS {rss:7.0f} MiB (psql)")
        r = child("read-adbc", url, work, env)
        print(f"read   ADBC fetch_arrow_table (all in memory)   {r['seconds']:7.2f} s   peak RSS {r['rss_mib']:7.0f} MiB "
              f"({r['rows']:,} rows)")
        r = child("read-anonflow", url, work, env)
        print(f"read   anonflow postgres source -> store        {r['seconds']:7.2f} s   peak RSS {r['rss_mib']:7.0f} MiB "
              f"(incl. content hash; {r['rows']:,} rows)")

        for mode, publish in (("write-csv", "{publisher: csv, path: out.csv}"),
                              ("write-postgres", f"{{publisher: postgres, url: '{url}', table: t_stream, "
                                                 "if_exists: replace}"),
                              ("write-loaded", f"{{publisher: postgres, url: '{url}', table: t_loaded, "
                                               "if_exists: replace}")):
            (work / f"{mode}.yaml").write_text(WORKFLOW.format(csv=csv, publish=publish))
            r = child(mode, url, work, env)
            if r["status"] != "succeeded":
                raise SystemExit(f"{mode}: {r['error']}")
            what = {"write-csv": "run, csv publisher (reference)", "write-postgres": "run, postgres (streamed)",
                    "write-loaded": "run, postgres (loaded whole)"}[mode]
            print(f"write  {what:40s} publish {r['publish']:7.2f} s   run {r['wall']:7.2f} s   "
                  f"peak RSS {r['rss_mib']:7.0f} MiB")
    finally:
        server.stop()
        if not keep:
            for p in work.glob("write-*"):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
            for p in work.glob("out-*"):
                shutil.rmtree(p, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
