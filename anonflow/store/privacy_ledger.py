"""The privacy ledger: the differential-privacy losses charged to each source, across runs and
workflows, and the budgets runs declared for them (tables ``af_privacy_ledger`` and
``af_privacy_budgets``, :mod:`.migrations`).

A source is known by its content hash (a file's sha256, as the run's source step records it),
so the same data read through another workflow, path or name is charged to the same account.
The rows hold figures (ε, δ, ρ), names and hashes, never a data value: purging a store
(:mod:`.purge`, :mod:`.erase`) leaves them, and a spend once charged is never taken back.
"""

from __future__ import annotations

from typing import Any, Iterable

from .connection import now


class PrivacyLedger:
    """The part of :class:`anonflow.store.Store` that keeps the privacy ledger."""

    con: Any

    def charge(self, run_id: str, step: str, charges: Iterable[tuple[str, str, Any]]) -> None:
        """Charge ``step`` of ``run_id``'s losses: ``(source_hash, source_name, charge)`` each,
        ``charge`` an :class:`anonflow.privacyloss.Charge`; committed at once."""
        rows = [(run_id, step, h, name, c.measure, c.epsilon, c.delta, c.rho, now()) for h, name, c in charges]
        if rows:
            self.con.executemany("INSERT INTO af_privacy_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def _has_ledger(self) -> bool:
        """Whether the store has the ledger's tables (a store of an older anonflow opened
        read-only has not: nothing was charged to it)."""
        return bool(self.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = "
                                     "'af_privacy_ledger'").fetchone()[0])

    def charges(self, source_hash: str | None = None) -> list[dict[str, Any]]:
        """The ledger's rows (of one source), oldest first."""
        if not self._has_ledger():
            return []
        where, params = ("WHERE source_hash = ?", [source_hash]) if source_hash is not None else ("", [])
        cur = self.con.execute(f"SELECT * FROM af_privacy_ledger {where} ORDER BY charged_at, run_id, step", params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def declare_budgets(self, run_id: str, budgets: Iterable[tuple[str, str, float, float]]) -> None:
        """The budgets ``run_id`` declared: ``(source_hash, source_name, epsilon, delta)`` each."""
        rows = [(run_id, h, name, float(e), float(d), now()) for h, name, e, d in budgets]
        if rows:
            self.con.executemany("INSERT INTO af_privacy_budgets VALUES (?, ?, ?, ?, ?, ?)", rows)

    def privacy_accounts(self) -> list[dict[str, Any]]:
        """Every source the ledger knows (charged or given a budget): ``{"source_hash",
        "source_name" (the latest name), "budget": {"epsilon", "delta", "run_id"} or None,
        "charges": [...]}``, by name."""
        if not self._has_ledger():
            return []
        budgets = {}
        for h, name, e, d, rid in self.con.execute(
                "SELECT source_hash, source_name, epsilon, delta, run_id FROM af_privacy_budgets "
                "ORDER BY declared_at").fetchall():
            budgets[h] = (name, {"epsilon": e, "delta": d, "run_id": rid})
        accounts: dict[str, dict[str, Any]] = {}
        for row in self.charges():
            acc = accounts.setdefault(row["source_hash"], {"source_hash": row["source_hash"], "budget": None,
                                                           "charges": []})
            acc["source_name"] = row["source_name"]
            acc["charges"].append(row)
        for h, (name, budget) in budgets.items():
            acc = accounts.setdefault(h, {"source_hash": h, "source_name": name, "charges": []})
            acc["budget"] = budget
            acc["source_name"] = name
        return sorted(accounts.values(), key=lambda a: (a["source_name"], a["source_hash"]))
