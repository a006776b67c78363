"""The DuckDB store, by concern: the connection and its settings (:mod:`.connection`), the
numbered migrations of its internal tables (:mod:`.migrations`), content-addressed data tables
(:mod:`.tables`), the ledger of runs, steps, lineage and the cache (:mod:`.ledger`), removing
records (:mod:`.erase`, and :mod:`.purge`, which decides what goes), behind one facade,
:class:`Store`. DuckDB's errors are turned into anonflow's inside this package.

The store reads no source itself: :mod:`anonflow.sources` fills a scratch table through
:meth:`Store.ingest`. The DuckDB connection factory and the SQL sandbox are
:mod:`anonflow.sandbox`, which the plugin API uses without this package.
"""

from ..sandbox import check_condition, condition_mask, duckdb_file, ident, sandboxed_connection
from .connection import DatabaseError, OutOfMemory, Resources, damaged, open_failure
from .erase import REDACTED
from .facade import Store
from .ledger import ACTIVE_RUNS, LATEST, resolve_target, trace
from .migrations import MIGRATIONS, SCHEMA_VERSION, schema_markdown
from .purge import KEEP, PurgePlan, held, parse_age, plan_purge, purge, purge_file
from .tables import HASH_BATCH, SCRATCH, Artifact

__all__ = ["ACTIVE_RUNS", "Artifact", "DatabaseError", "HASH_BATCH", "KEEP", "LATEST", "MIGRATIONS", "OutOfMemory",
           "PurgePlan", "REDACTED", "Resources", "SCHEMA_VERSION", "SCRATCH", "Store", "check_condition",
           "condition_mask", "damaged", "duckdb_file", "held", "ident", "open_failure", "parse_age", "plan_purge",
           "purge", "purge_file", "resolve_target", "sandboxed_connection", "schema_markdown", "trace"]
