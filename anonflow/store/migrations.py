"""The store's internal tables: numbered, append-only migrations (:data:`MIGRATIONS`), applied
when a store is opened for writing, checked when it is opened read-only; the schema page of
the docs is rendered from them (:func:`schema_markdown`)."""

from __future__ import annotations

from typing import Any

from ..errors import StoreError
from .connection import now

#: Numbered migrations; append only, never edit one that has shipped.
MIGRATIONS: list[tuple[str, str]] = [
    ("create lineage tables", """
        CREATE TABLE af_tables (
            name        VARCHAR PRIMARY KEY,  -- DuckDB table holding the data
            hash        VARCHAR NOT NULL,     -- identity: data hash + typing + claims
            data_hash   VARCHAR NOT NULL,     -- canonical content hash (anonflow.table.table_hash)
            rows        BIGINT NOT NULL,
            typing      JSON,                 -- anonflow.schema.Typing, null for untyped sources
            claims      JSON,                 -- privacy models claimed by the producing algorithm
            created_run VARCHAR,
            created_step VARCHAR,
            created_at  TIMESTAMPTZ
        );
        CREATE TABLE af_runs (
            run_id        VARCHAR PRIMARY KEY,
            workflow      VARCHAR NOT NULL,   -- the workflow's name
            workflow_path VARCHAR,
            workflow_text VARCHAR NOT NULL,
            workflow_hash VARCHAR NOT NULL,
            seed          BIGINT NOT NULL,
            overrides     JSON,               -- --set STEP.PARAM=VALUE, in order
            versions      JSON,               -- anonflow, plugins, duckdb, pyarrow, numpy, python
            status        VARCHAR NOT NULL,   -- running | succeeded | failed
            error         VARCHAR,
            started_at    TIMESTAMPTZ NOT NULL,
            finished_at   TIMESTAMPTZ
        );
        CREATE TABLE af_step_runs (
            run_id       VARCHAR NOT NULL,
            step         VARCHAR NOT NULL,
            position     INTEGER NOT NULL,    -- execution order within the run
            kind         VARCHAR NOT NULL,    -- source | typing | algorithm | evaluate | publish
            uses         VARCHAR NOT NULL,
            plugin_version VARCHAR,
            params       JSON,                -- canonical JSON, defaults filled in
            seed         UBIGINT,             -- the step's own seed (workflow seed + step name)
            fingerprint  VARCHAR,
            inputs       JSON,                -- [{"name", "table", "hash"}]
            output_table VARCHAR,
            output_hash  VARCHAR,
            rows         BIGINT,
            seconds      DOUBLE,
            status       VARCHAR NOT NULL,    -- succeeded | cached | failed
            cached_from  VARCHAR,             -- run id whose result was reused
            summary      JSON,                -- notes and counts reported by the step
            error        VARCHAR,
            PRIMARY KEY (run_id, step)
        );
        CREATE TABLE af_lineage (
            run_id VARCHAR NOT NULL,
            parent VARCHAR NOT NULL,          -- table name or file path
            child  VARCHAR NOT NULL,
            step   VARCHAR NOT NULL
        );
        CREATE TABLE af_metrics (
            run_id VARCHAR NOT NULL,
            step   VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            value  DOUBLE,
            PRIMARY KEY (run_id, step, metric)
        );
        CREATE TABLE af_outputs (
            run_id VARCHAR NOT NULL,
            step   VARCHAR NOT NULL,
            path   VARCHAR NOT NULL,
            sha256 VARCHAR NOT NULL,
            rows   BIGINT NOT NULL
        );
    """),
    ("hierarchies of typed tables", """
        -- column -> {"table": name of the hierarchy's data table, "builder": ...}
        ALTER TABLE af_tables ADD COLUMN hierarchies JSON;
    """),
    ("published files that are not tables", """
        -- rows is NULL for a file that is not a table (a release's manifest.json, report.html)
        ALTER TABLE af_outputs ALTER COLUMN rows DROP NOT NULL;
    """),
    ("the plugins each step ran", """
        -- [{"kind", "name", "version", "distribution", "code"}]: every plugin whose code the
        -- step ran, with the sha256 of its package's files (anonflow.codehash)
        ALTER TABLE af_step_runs ADD COLUMN plugins JSON;
    """),
    ("purged data tables", """
        -- when 'anonflow purge' (or a workflow's retain:) removed the table's records; the row,
        -- its content hashes and the lineage that names it stay
        ALTER TABLE af_tables ADD COLUMN purged_at TIMESTAMPTZ;
        CREATE TABLE af_purges (
            purged_at    TIMESTAMPTZ NOT NULL,
            selection    JSON NOT NULL,       -- {"runs": [...]} | {"before": ...} | {"all": true}, with "keep"
            tables       JSON NOT NULL,       -- the data tables whose records were removed
            rows         BIGINT NOT NULL,     -- records removed (each distinct content once)
            bytes_before BIGINT,              -- the store file's size before and after it was rewritten
            bytes_after  BIGINT
        );
    """),
    ("run journals", """
        -- where each run's journal lies (anonflow.cleanup): what it created outside the store
        -- (work folders, Dask and spill folders, earlier outputs moved aside), written before
        -- each is made; cleaned is set when the run ended or its leftovers were cleaned up:
        -- [] when it had cleaned up itself, else one line per thing removed or put back
        CREATE TABLE af_journal (
            run_id   VARCHAR PRIMARY KEY,
            journal  VARCHAR NOT NULL,
            cleaned  JSON
        );
    """),
    ("the privacy ledger", """
        -- one row per differential-privacy loss charged to a source (anonflow.store.privacy_ledger):
        -- figures only, never a data value; purging a store never removes these rows
        CREATE TABLE af_privacy_ledger (
            run_id      VARCHAR NOT NULL,
            step        VARCHAR NOT NULL,
            source_hash VARCHAR NOT NULL,     -- the source's content hash (a file's sha256) before it is read
            source_name VARCHAR NOT NULL,     -- the workflow's name of the source
            measure     VARCHAR NOT NULL,     -- pure | approximate | zcdp
            epsilon     DOUBLE,               -- pure and approximate losses
            delta       DOUBLE,
            rho         DOUBLE,               -- zcdp losses
            charged_at  TIMESTAMPTZ NOT NULL
        );
        -- the budgets runs declared for their sources (anonflow budget shows the latest)
        CREATE TABLE af_privacy_budgets (
            run_id      VARCHAR NOT NULL,
            source_hash VARCHAR NOT NULL,
            source_name VARCHAR NOT NULL,
            epsilon     DOUBLE NOT NULL,
            delta       DOUBLE NOT NULL,
            declared_at TIMESTAMPTZ NOT NULL
        );
    """),
]

SCHEMA_VERSION = len(MIGRATIONS)
#: the migration that created ``af_journal``
JOURNALS = next(v for v, (name, _) in enumerate(MIGRATIONS, start=1) if name == "run journals")
#: prefix of tables being written (renamed to their content address once hashed)


class Migrations:
    """The part of :class:`anonflow.store.Store` that creates and checks its schema."""

    con: Any
    path: Any

    def _applied(self) -> int:
        exists = self._one("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'af_migrations'")[0]
        if not exists:
            return 0
        return int(self._one("SELECT coalesce(max(version), 0) FROM af_migrations")[0])

    def _check_schema(self) -> None:
        applied = self._applied()
        if applied == 0:
            raise StoreError(f"{self.path} is not an anonflow store")
        if applied > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer anonflow (schema {applied} > {SCHEMA_VERSION})")

    def _migrate(self) -> None:
        self.con.execute("CREATE TABLE IF NOT EXISTS af_migrations (version INTEGER PRIMARY KEY, "
                         "name VARCHAR, applied_at TIMESTAMPTZ)")
        applied = self._applied()
        if applied > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer anonflow (schema {applied} > {SCHEMA_VERSION})")
        if applied == SCHEMA_VERSION:
            return
        # every pending migration in one transaction: a store is upgraded whole or not at all, and
        # a new store is written with one commit instead of one per migration
        self.con.execute("BEGIN TRANSACTION")
        try:
            for version, (name, sql) in enumerate(MIGRATIONS, start=1):
                if version > applied:
                    self.con.execute(sql)
                    self.con.execute("INSERT INTO af_migrations VALUES (?, ?, ?)", [version, name, now()])
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise


def schema_markdown() -> str:
    """The store's schema as Markdown, rendered from the migrations (docs/store.md embeds it)."""
    parts = []
    for version, (name, sql) in enumerate(MIGRATIONS, start=1):
        body = "\n".join(line[8:] if line.startswith(" " * 8) else line.strip() for line in sql.strip("\n").splitlines())
        parts.append(f"### Migration {version}: {name}\n\n```sql\n{body.strip()}\n```\n")
    return "\n".join(parts)

