"""The ledger: runs, step runs, metrics, published files and lineage edges, the cache's
lookups (:meth:`Ledger.cached_step`), the journals of runs, and tracing what produced an
artifact back to its sources (:func:`trace`)."""

from __future__ import annotations

import json
import os
import secrets
import time
from typing import Any, Iterable

from ..cleanup import recover
from ..errors import StoreError
from .connection import now, to_json
from .migrations import JOURNALS

#: runs this process has begun and not finished (never marked interrupted while it lives)
ACTIVE_RUNS: set[str] = set()

#: the run id that names the newest run (``anonflow report latest``, ``runs latest``, ``--run latest``)
LATEST = "latest"


class Ledger:
    """The part of :class:`anonflow.store.Store` that records runs and answers questions about them."""

    con: Any
    path: Any
    read_only: bool

    def _clean_journals(self) -> None:
        """Clean up after runs that were killed (:func:`anonflow.cleanup.recover`), from the
        journals this store recorded; what was cleaned is kept in ``af_journal.cleaned``
        (``anonflow runs`` shows it)."""
        active = sorted(ACTIVE_RUNS) or [""]
        rows = self.con.execute("SELECT run_id, journal FROM af_journal WHERE cleaned IS NULL AND run_id NOT IN "
                                f"({', '.join('?' * len(active))})", active).fetchall()
        for run_id, journal in rows:
            if not os.path.lexists(journal):
                done = [f"its journal {journal} was gone: a later run publishing into that folder cleaned up after it "
                        "(or it was removed by hand)"]
            else:
                got = recover(journal)
                if got is None:
                    continue  # its run is alive (another thread of this process, or its lock is held)
                done = got
            self.journal_cleaned(run_id, done)

    def record_journal(self, run_id: str, journal: str) -> None:
        """Where the run's journal lies (:mod:`anonflow.cleanup`)."""
        self.con.execute("INSERT INTO af_journal VALUES (?, ?, NULL)", [run_id, journal])

    def journal_cleaned(self, run_id: str, done: list[str]) -> None:
        """The run's leftovers were cleaned (``done``: one line each; empty if there were none)."""
        self.con.execute("UPDATE af_journal SET cleaned = ? WHERE run_id = ?", [to_json(done), run_id])

    def _mark_interrupted(self) -> None:
        """Runs left ``running`` by a process that died (killed, power cut) become
        ``interrupted``: this connection holds DuckDB's write lock, so no other process is
        running them, and runs of this process are in :data:`ACTIVE_RUNS`."""
        active = sorted(ACTIVE_RUNS) or [""]
        self.con.execute("UPDATE af_runs SET status = 'interrupted', error = coalesce(error, ?) "
                         f"WHERE status = 'running' AND run_id NOT IN ({', '.join('?' * len(active))})",
                         ["its process ended before the run finished (killed or crashed); "
                          "its steps up to then are recorded", *active])


    # -- runs ----------------------------------------------------------------------------

    def begin_run(self, *, workflow: str, path: str, text: str, text_hash: str, seed: int,
                  overrides: list, versions: dict) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
        ACTIVE_RUNS.add(run_id)
        self.con.execute("INSERT INTO af_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', NULL, ?, NULL)",
                         [run_id, workflow, path, text, text_hash, seed, to_json(overrides), to_json(versions), now()])
        return run_id

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        ACTIVE_RUNS.discard(run_id)
        self.con.execute("UPDATE af_runs SET status = ?, error = ?, finished_at = ? WHERE run_id = ?",
                         [status, error, now(), run_id])

    def record_step(self, run_id: str, rec: dict[str, Any], *, metrics: dict[str, float] | None = None,
                    outputs: Iterable[dict[str, Any]] = (), lineage: Iterable[tuple[str, str]] = ()) -> None:
        """Record one step run with its metric values, output files and lineage edges, atomically."""
        cols = ["position", "kind", "uses", "plugin_version", "params", "seed", "fingerprint", "inputs",
                "output_table", "output_hash", "rows", "seconds", "status", "cached_from", "summary", "error", "plugins"]
        values = [rec.get(c) for c in cols]
        for i, c in enumerate(cols):
            if c in ("params", "inputs", "summary", "plugins") and values[i] is not None:
                values[i] = to_json(values[i])
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute(f"INSERT INTO af_step_runs (run_id, step, {', '.join(cols)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(cols))})", [run_id, rec["step"], *values])
            # one statement per table (an evaluate step records dozens of metric values)
            _insert_rows(self.con, "af_metrics", [(run_id, rec["step"], name, value)
                                                  for name, value in (metrics or {}).items()])
            _insert_rows(self.con, "af_outputs", [(run_id, rec["step"], out["path"], out["sha256"], out["rows"])
                                                  for out in outputs])
            _insert_rows(self.con, "af_lineage", [(run_id, parent, child, rec["step"]) for parent, child in lineage])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def cached_step(self, fingerprint: str) -> dict[str, Any] | None:
        """The latest successful step run with this fingerprint whose output still exists."""
        rows = self._dicts(
            "SELECT s.* FROM af_step_runs s JOIN af_runs r USING (run_id) "
            "WHERE s.fingerprint = ? AND s.status IN ('succeeded', 'cached') "
            "ORDER BY r.started_at DESC LIMIT 1", [fingerprint])
        if not rows:
            return None
        rec = rows[0]
        if rec["output_table"] and self.artifact(rec["output_table"]) is None:
            return None
        rec["metrics"] = dict(self.con.execute(
            "SELECT metric, value FROM af_metrics WHERE run_id = ? AND step = ? ORDER BY metric",
            [rec["run_id"], rec["step"]]).fetchall())
        return rec

    # -- queries for the CLI -------------------------------------------------------------

    def _dicts(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            rec = dict(zip(names, row))
            for key in ("params", "inputs", "summary", "overrides", "versions", "typing", "claims", "plugins", "cleaned"):
                if isinstance(rec.get(key), str):
                    rec[key] = json.loads(rec[key])
            out.append(rec)
        return out

    def _status(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # read-only: no process holds the write lock, so a run still marked running has died
        if self.read_only:
            for r in rows:
                if r.get("status") == "running" and r.get("run_id") not in ACTIVE_RUNS:
                    r["status"] = "interrupted"
                    r["error"] = r.get("error") or "its process ended before the run finished"
        return rows

    def _cleaned(self) -> str:
        """A column ``cleaned``: what was cleaned up after the run (a list of lines; empty when
        nothing was left, NULL when not known yet), for :meth:`runs` and :meth:`run`."""
        if self._applied() < JOURNALS:  # a store of an older anonflow, opened read-only
            return "NULL::JSON AS cleaned"
        return "(SELECT j.cleaned FROM af_journal j WHERE j.run_id = af_runs.run_id) AS cleaned"

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return self._status(self._dicts(
            "SELECT run_id, workflow, workflow_path, seed, overrides, status, error, started_at, finished_at, "
            f"{self._cleaned()} FROM af_runs ORDER BY started_at DESC, run_id DESC LIMIT ?", [limit]))

    def run(self, run_id: str) -> dict[str, Any]:
        """The run ``run_id``: its full id, an unambiguous prefix of one, or ``latest`` (the
        newest run: every command that takes a run id reads it so)."""
        if run_id == LATEST:
            newest = self._one("SELECT run_id FROM af_runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if newest is None:
                raise StoreError(f"no run recorded in {self.path}, so no latest one")
            run_id = newest[0]
        rows = self._status(self._dicts(f"SELECT *, {self._cleaned()} FROM af_runs WHERE run_id = ? OR "
                                        "(? <> '' AND starts_with(run_id, ?)) "
                                        "ORDER BY started_at DESC", [run_id, run_id, run_id]))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        if len(rows) > 1 and rows[0]["run_id"] != run_id:
            raise StoreError(f"run id prefix {run_id!r} is ambiguous: {', '.join(r['run_id'] for r in rows[:5])}")
        return rows[0]

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM af_step_runs WHERE run_id = ? ORDER BY position", [run_id])

    def metrics(self, run_id: str) -> dict[str, float]:
        rows = self.con.execute("SELECT m.step, m.metric, m.value FROM af_metrics m JOIN af_step_runs s "
                                "USING (run_id, step) WHERE run_id = ? ORDER BY s.position, m.metric",
                                [run_id]).fetchall()
        return {f"{step}.{metric}": value for step, metric, value in rows}

    def outputs(self, run_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT o.step, o.path, o.sha256, o.rows FROM af_outputs o JOIN af_step_runs s "
                           "USING (run_id, step) WHERE run_id = ? ORDER BY s.position, o.path", [run_id])

    def find_producer(self, target: str) -> dict[str, Any] | None:
        """The latest step run that produced ``target``: a table name, a file path or a step name."""
        for sql in (
            "SELECT s.* FROM af_step_runs s JOIN af_runs r USING (run_id) WHERE s.output_table = ? "
            "ORDER BY r.started_at DESC LIMIT 1",
            "SELECT s.* FROM af_outputs o JOIN af_step_runs s USING (run_id, step) JOIN af_runs r USING (run_id) "
            "WHERE o.path = ? ORDER BY r.started_at DESC LIMIT 1",
        ):
            rows = self._dicts(sql, [target])
            if rows:
                return rows[0]
        return None

    def step_in_run(self, run_id: str, step: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM af_step_runs WHERE run_id = ? AND step = ?", [run_id, step])
        return rows[0] if rows else None

    def columns(self, name: str) -> list[tuple[str, str]]:
        """Column names and DuckDB types of a stored table, in order."""
        return [(r[0], r[1]) for r in self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position", [name]).fetchall()]

    def earlier_runs(self, run_id: str) -> list[dict[str, Any]]:
        """Successful runs of the same workflow (same name and file content) that started
        before ``run_id``, oldest first."""
        return self._dicts(
            "SELECT o.run_id, o.seed, o.overrides FROM af_runs o JOIN af_runs r "
            "ON o.workflow = r.workflow AND o.workflow_hash = r.workflow_hash "
            "WHERE r.run_id = ? AND o.run_id <> r.run_id AND o.status = 'succeeded' AND o.started_at < r.started_at "
            "ORDER BY o.started_at, o.run_id", [run_id])

    def published_digests(self, path: str) -> set[str]:
        """The sha256 digests of the files this store recorded publishing at ``path``."""
        rows = self.con.execute("SELECT DISTINCT sha256 FROM af_outputs WHERE path = ?", [path]).fetchall()
        return {r[0] for r in rows}

    def latest_run_with_step(self, step: str) -> str | None:
        row = self._one("SELECT r.run_id FROM af_step_runs s JOIN af_runs r USING (run_id) WHERE s.step = ? "
                               "ORDER BY r.started_at DESC LIMIT 1", [step])
        return row[0] if row else None


def trace(store: Any, target: str, run_id: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Return ``(depth, step record)`` pairs: the producer of ``target`` first, then its inputs'
    producers, depth-first. ``target`` is a step name, a store table name or a published file."""
    start = resolve_target(store, target, run_id)
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()

    def visit(rec: dict[str, Any], depth: int) -> None:
        key = (rec["run_id"], rec["step"])
        if key in seen:
            return
        seen.add(key)
        rec = dict(rec)
        rec["files"] = [o for o in store.outputs(rec["run_id"]) if o["step"] == rec["step"]]
        prefix = f"{rec['step']}."
        rec["metrics"] = {k[len(prefix):]: v for k, v in store.metrics(rec["run_id"]).items() if k.startswith(prefix)}
        out.append((depth, rec))
        for inp in [*(rec.get("inputs") or []), *((rec.get("summary") or {}).get("references") or [])]:
            parent = store.step_in_run(rec["run_id"], inp["name"]) if "table" in inp else None
            if parent is not None:
                visit(parent, depth + 1)

    visit(start, 0)
    return out


def resolve_target(store: Any, target: str, run_id: str | None) -> dict[str, Any]:
    if run_id is not None:
        rid = store.run(run_id)["run_id"]
        rec = store.step_in_run(rid, target)
        if rec is None:
            raise StoreError(f"run {rid} has no step {target!r}")
        return rec
    rec = store.find_producer(target)
    if rec is None and os.path.exists(target):
        rec = store.find_producer(os.path.abspath(target))
    if rec is None:
        latest = store.latest_run_with_step(target)
        if latest is not None:
            rec = store.step_in_run(latest, target)
    if rec is None:
        raise StoreError(f"nothing in {store.path} is called {target!r}: give a step name, a table name "
                         "(t_...) or the path of a published file")
    return rec


def _insert_rows(con: Any, table: str, rows: list[tuple[Any, ...]]) -> None:
    """``INSERT INTO table`` of ``rows`` (tuples of one length) as one statement, values bound."""
    if rows:
        one = "(" + ", ".join("?" * len(rows[0])) + ")"
        con.execute(f"INSERT INTO {table} VALUES {', '.join([one] * len(rows))}", [v for row in rows for v in row])
