"""The public API for plugin authors.

Everything a plugin needs is importable from here::

    from anonflow.api import Algorithm, Metric, Publisher, Param, StepContext, hookimpl

A plugin object is an instance of one of the four base classes below (``Algorithm``,
``Metric``, ``Publisher``, ``HierarchyBuilder``), with a short stable ``name`` (third
parties prefix theirs: ``acme.discernibility``), a ``version``, a one-line ``description``
and its declared ``params``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Iterable, Mapping, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .cleanup import cleanup_on_termination, fsync_folder
from .egress import current as current_egress
from .errors import AnonflowError, InputError, PluginError, PurgedError, RunError
from .filemodes import make_ordinary
from .outputs import OutputGuard, file_sha256
from .hierarchy import Hierarchy
from .hookspecs import hookimpl
from .params import REQUIRED, Param
from .schema import CLASS, ROW, Attribute, Typing
from .sandbox import sandboxed_connection
from .sourcekind import Source, SourceSpec
from .table import TypedTable
from .generalization import OPTION as GENERALIZATION_OPTION
from .generalization import (generalization, generalized_attribute, interval_label, interval_labels,
                             mark_generalized, numeric_column, set_label, set_labels, structured_columns)
from .grading import Grading, sensitivity_distance
from .hierarchy import encode as value_codes
from .hierarchy import lookup, value_keys
from .canonjson import canonical_json
from .params import ParamError, metric_entries, relative_paths, validate_params
from .pgconnect import connect as postgres_connect
from .pgurl import check_url as check_postgres_url
from .pgurl import display as postgres_display
from .pgurl import message as postgres_message
from .pgurl import quote_ident as postgres_ident
from .schema import MISSING_CATEGORY
from .table import TableHasher, table_hash


def sql_ident(name: str) -> str:
    """A column or table name quoted for SQL (for queries given to ``ctx.sql`` / ``ctx.derive``)."""
    return '"' + name.replace('"', '""') + '"'

__all__ = [
    "sql_ident",
    "Algorithm", "Metric", "Publisher", "HierarchyBuilder", "Hierarchy", "Param", "REQUIRED", "StepContext", "Output",
    "Partition", "MAX_SUPPRESSION", "suppression_limit", "better_direction",
    # what the release publisher's verify and apply may ask of the engine (anonflow.session.Session)
    "Engine",
    "TypedTable", "Typing", "Attribute", "ROW", "CLASS", "hookimpl", "AnonflowError",
    "InputError", "RunError", "PluginError", "PurgedError", "atomic_write", "RunInfo",
    # what may leave the process (anonflow.egress; docs/egress.md)
    "check_destination",
    # a published folder written outside the output guard gets the modes of published files
    "make_ordinary",
    # DuckDB over Arrow tables a plugin registers: no file, URL or extension (anonflow.sandbox)
    "sandboxed_connection",
    # a kind of source (anonflow_register_sources; anonflow.sources holds anonflow's own)
    "Source", "SourceSpec",
    # SIGTERM and SIGHUP end a block as Ctrl-C does, so that its cleanup runs (anonflow.cleanup)
    "cleanup_on_termination",
    # a folder's new, renamed or removed entries made durable (anonflow.cleanup)
    "fsync_folder",
    # publishing generalized values (anonflow.generalization)
    "interval_label", "interval_labels", "set_label", "set_labels", "generalized_attribute", "mark_generalized",
    "generalization", "structured_columns", "numeric_column", "GENERALIZATION_OPTION",
    # the category a missing value becomes under the typing step's ``missing: category`` (anonflow.schema)
    "MISSING_CATEGORY",
    # a sensitive attribute's grading and the distance between two distributions under it (anonflow.grading)
    "Grading", "sensitivity_distance",
    # a hierarchy's lookups: values as keys, values as (distinct, codes), codes through a table (anonflow.hierarchy)
    "value_keys", "value_codes", "lookup",
    # the canonical JSON every recorded hash is taken over (anonflow.lineage)
    "canonical_json",
    # parameters checked against a plugin's declared params; an evaluate step's metrics entries (anonflow.params)
    "validate_params", "ParamError", "metric_entries",
    # parameters that name files, recorded relative to the workflow's folder (as the runner records them)
    "relative_paths",
    # content hashes of Arrow tables, whole or fed batch by batch, as the store takes them (anonflow.table)
    "table_hash", "TableHasher",
    # PostgreSQL as libpq reads it: a URL checked, shown without its password, a connection, an error's
    # one-line message, a quoted identifier (anonflow.postgres)
    "check_postgres_url", "postgres_display", "postgres_connect", "postgres_message", "postgres_ident",
]


class Plugin:
    """Common declaration of every plugin object."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    description: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()

    def check(self, params: Mapping[str, Any], **tables: TypedTable) -> None:
        """Reject unsuitable input before any work is done (raise :class:`InputError`).

        Called with the validated parameters and the step's input tables, right before
        ``run`` / ``compute`` / ``publish``. The default accepts everything.
        """

    #: the measures :meth:`privacy_loss` may state a loss in: ``pure`` (ε-DP: ``epsilon``),
    #: ``approximate`` ((ε, δ)-DP: ``epsilon``, ``delta``) and ``zcdp`` (ρ-zCDP: ``rho``)
    PRIVACY_MEASURES: ClassVar[tuple[str, ...]] = ("pure", "approximate", "zcdp")
    #: False for a step whose output carries noise drawn from a cryptographically safe sampler
    #: (OpenDP's), which no seed reproduces: ``verify --rerun`` then compares everything of its
    #: output but the noised values (schema, which cells, the accounting) and says so.
    reproducible: ClassVar[bool] = True

    def privacy_loss(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The differential-privacy loss this step spends on the source(s) its input comes
        from, worked out from the parameters alone (before any data is read): ``{"measure":
        m, ...}`` with ``m`` one of :attr:`PRIVACY_MEASURES` and its figures (``{"measure":
        "approximate", "epsilon": 1.0, "delta": 1e-6}``), plus any figures that make up the
        guarantee (SafePub's sampling probability and derived k). The engine composes the
        losses of a run's steps per source, checks them against the budget the workflow
        declares and the store's ledger of what earlier runs spent, and records the spend.
        None (the default): the step makes no differential-privacy claim."""
        return None


#: the suppression cap an algorithm that suppresses records gets (see :attr:`Algorithm.suppresses`).
MAX_SUPPRESSION = Param("max_suppression", "float", default=0.05, min=0.0, max=1.0,
                        help="largest fraction of the records that may be suppressed; more fails the step")


def suppression_limit(cap: float, records: int) -> int:
    """The most records a suppression cap (a fraction) allows out of ``records``:
    ``floor(cap * records)`` (with a little slack for decimal fractions such as 0.05)."""
    return int(math.floor(float(cap) * records + 1e-9))


class Algorithm(Plugin):
    """An anonymization algorithm."""

    def references(self, params: Mapping[str, Any]) -> list[str]:
        """Names of other sources or steps whose tables the algorithm reads through
        ``ctx.table`` beyond its parameters of kind ``step`` (which count already): the
        lattice names its privacy model's population table this way. Default: none."""
        return []

    kind = "algorithm"
    #: how many input tables the step takes. Most algorithms take one typed table; a
    #: post-processing algorithm (e.g. refining a partition) may take two, [original, partition]:
    #: ``run`` then receives the first as ``table`` and finds all of them in ``ctx.inputs``.
    inputs: ClassVar[int] = 1
    #: whether ``run`` may suppress records (return them with a null ``_class``). An algorithm
    #: that does gets the parameter ``max_suppression`` (:data:`MAX_SUPPRESSION`: a fraction in
    #: [0, 1], default 0.05) added to its ``params`` unless it declares the one named by
    #: :attr:`suppression_param` itself, and the engine fails the step when more than
    #: ``floor(cap * records)`` records come back suppressed. An algorithm that does not declare
    #: ``suppresses`` is held to a cap of 0: any suppressed record fails the step.
    suppresses: ClassVar[bool] = False
    #: the parameter holding the suppression cap (a fraction of the input's records).
    suppression_param: ClassVar[str] = "max_suppression"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.suppresses and not any(p.name == cls.suppression_param for p in cls.params):
            cls.params = (*cls.params, dataclasses.replace(MAX_SUPPRESSION, name=cls.suppression_param))

    def suppression_cap(self, params: Mapping[str, Any]) -> float:
        """The largest fraction of the input's records the step may suppress (0 unless
        :attr:`suppresses`)."""
        if not self.suppresses:
            return 0.0
        value = params.get(self.suppression_param)
        return float(MAX_SUPPRESSION.default if value is None else value)

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The privacy models this algorithm guarantees for these parameters.

        Example: ``{"k-anonymity": {"k": params["k"]}}``. Privacy-check metrics use the
        claim as their default threshold, so a broken algorithm fails its own run.
        """
        return {}

    #: what :meth:`perturbs` may say a column underwent: ``randomize`` (values replaced at random
    #: by others of the domain: PRAM), ``noise`` (numbers moved by random amounts), ``swap`` (values
    #: exchanged between records: rank swapping, shuffling) and ``recode`` (values mapped by a
    #: fixed rule: top/bottom coding, global recoding)
    PERTURBATION_KINDS: ClassVar[tuple[str, ...]] = ("randomize", "noise", "swap", "recode")

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        """What a perturbative algorithm changes, for these parameters and its input ``table``
        (the columns a default picks; None where no table is at hand): ``{column: {"kind": k,
        ...}}`` with ``k`` one of :attr:`PERTURBATION_KINDS` and the rest the parameters that are
        its guarantee, stated exactly (PRAM's retention probability, noise's relative standard
        deviation, rank swapping's p %): e.g. ``{"income": {"kind": "noise", "method":
        "additive", "relative_sd": 0.1}}``. JSON data only.

        An algorithm that changes values instead of coarsening them makes no class-based claim
        it cannot back (its records are classes of one); this declaration is what it promises.
        The engine records it in the step's summary (``perturbs``), ``anonflow runs`` prints it
        and the ``release`` publisher states every such step of the released table's lineage in
        the manifest (``release.perturbations``) and the report. Default: changes nothing."""
        return {}

    #: whether the algorithm may run once per fragment of a partitioned table (its output on
    #: each group of fragments, merged, is an output it could give): true for clustering and
    #: microaggregation; false for a search whose promise is global (the lattice's optimal
    #: full-domain generalization), which then runs on the whole table unless it
    #: :meth:`summarizes` the fragments.
    per_fragment: ClassVar[bool] = True

    def summarizes(self, params: Mapping[str, Any]) -> bool:
        """Whether a step fed by a partitioned table (the ``partition`` step) computes
        :meth:`summarize` on each fragment where it lies and runs once on the whole table with
        the sum (``ctx.summary``), instead of running once per fragment. The default: no -- the
        algorithm runs on each fragment (or group of fragments) on its own, the class ids are
        made global and the claims are checked on the merged output."""
        return False

    def summarize(self, table: TypedTable, params: Mapping[str, Any], ctx: "StepContext") -> pa.Table:
        """One fragment's summary, for an algorithm whose :meth:`summarizes` is true: an Arrow
        table of distinct keys with a count column ``_af_n`` (BIGINT). The engine adds the
        counts of equal keys over all fragments (in DuckDB) and hands the sum, ordered by every
        column, to :meth:`run` as ``ctx.summary``; it must equal the summary of the whole table."""
        raise NotImplementedError

    def describe_plan(self, params: Mapping[str, Any], table: TypedTable) -> list[str]:
        """Lines ``anonflow plan`` prints under the step: what the run will face, worked out
        from the step's (first) input table without running the algorithm — e.g. the size of
        the lattice a search will walk. Called after :meth:`check`, on the table the
        preparation steps produce. The default says nothing."""
        return []

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: "StepContext") -> TypedTable:
        """Anonymize ``table``; return a table with the same records (same ``_row`` set),
        a ``_class`` column and the published quasi-identifier values."""
        raise NotImplementedError


class Metric(Plugin):
    """A utility metric, disclosure-risk measure, or privacy check."""

    kind = "metric"
    #: "utility", "risk" or "privacy" (privacy checks report ``<name>.holds``).
    category: ClassVar[str] = "utility"
    #: whether the metric needs the original table (evaluate steps then take two inputs).
    requires_original: ClassVar[bool] = True
    #: which headline values are better, ``"lower"`` or ``"higher"``; None: lower for utility
    #: (losses) and risk, higher for privacy checks (a model's value: k, l). The report's
    #: trade-off plot marks the Pareto frontier of a sweep by it (:func:`better_direction`).
    better: ClassVar[str | None] = None

    #: privacy checks implementing :meth:`partition_holds`: merging classes that each satisfy
    #: the model gives a class that satisfies it (so the model holds along generalization and a
    #: lattice search may prune: k-anonymity, distinct l-diversity, (alpha,k)-anonymity).
    monotone: ClassVar[bool] = True
    #: ... and a class that *contains* a satisfying class satisfies it, whatever else is merged
    #: in (k-anonymity, distinct l-diversity, p-sensitive k-anonymity: yes; (alpha,k): no). Only
    #: then does a generalization never suppress more records, so a lattice search with record
    #: suppression may prune; otherwise it checks every node.
    monotone_with_suppression: ClassVar[bool] = False
    #: :meth:`partition_holds` counts records only through ``partition.sizes``,
    #: :meth:`Partition.counts`, :meth:`Partition.distinct` and :meth:`Partition.codes` (or
    #: helpers built on them), so it accepts a *weighted* partition: one whose ``table``
    #: holds each distinct combination of the quasi-identifiers and sensitive attributes once,
    #: standing for ``weights`` records (a frequency table). A lattice search then works on
    #: the frequency table, which DuckDB computes, instead of one row per record.
    weighted_partitions: ClassVar[bool] = False

    def compute(self, original: TypedTable | None, anonymized: TypedTable,
                params: Mapping[str, Any], ctx: "StepContext") -> dict[str, float]:
        """Return named numbers. Keys are ``<name>`` for the headline value and
        ``<name>.<detail>`` for the rest."""
        raise NotImplementedError

    def partition_holds(self, partition: "Partition", params: Mapping[str, Any]) -> np.ndarray:
        """Privacy checks, optionally: whether each class of ``partition`` satisfies the model.

        Return a boolean array of length ``partition.n_classes``. ``params`` are this
        metric's validated parameters (those a lattice step got as ``model_params``); raise
        :class:`InputError` when one the check needs is missing. Called once per lattice node
        checked, so it must be vectorized (numpy over classes, no Python loop over records
        or classes) and must agree exactly with :meth:`compute` on the published table.
        """
        raise NotImplementedError


def better_direction(metric: Metric) -> str:
    """``"lower"`` or ``"higher"``: which of a metric's headline values are better
    (:attr:`Metric.better`, else by its category)."""
    if metric.better in ("lower", "higher"):
        return str(metric.better)
    return "higher" if metric.category == "privacy" else "lower"


class Publisher(Plugin):
    """Writes a table out."""

    kind = "publisher"
    #: the parameters that name paths this publisher writes (relative to the output folder);
    #: the engine checks them before a run starts, and ``ctx.resolve_output`` again at write time.
    outputs: ClassVar[tuple[str, ...]] = ("path",)
    #: parameters that name secrets (a signing key's path): they change no output, so they are
    #: left out of the step's fingerprint, and a release records neither them nor ``--set`` on them
    secret_params: ClassVar[tuple[str, ...]] = ()
    #: whether the publish step's ``row_id: true`` (keep ``_row``) may be used with it
    accepts_row_id: ClassVar[bool] = True

    def destinations(self, params: Mapping[str, Any]) -> list[str]:
        """Where this step writes outside the output folder, worked out from its parameters
        before the run: a list of URLs (``postgresql://user@host/db``, ``https://host/...``).
        The default, none: the publisher writes only files inside the output folder.

        The engine decides, never the publisher (docs/egress.md): before anything runs it
        checks every host these URLs name against the egress policy (this machine, or a host
        the person running anonflow named with ``--allow-host``), and ``anonflow verify
        --rerun`` does not run a publish step that declares any destination. A publisher that
        connects somewhere must declare it here, and should also call
        :func:`check_destination` with the same URL right before it connects."""
        return []

    def output_files(self, params: Mapping[str, Any]) -> list[str]:
        """The paths (relative to the output folder) this step will write, files or folders,
        worked out from its parameters before the run: the engine refuses two steps whose paths
        are the same or one inside the other. The default: the values of :attr:`outputs`."""
        return [params[k] for k in self.outputs if isinstance(params.get(k), str)]

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: "StepContext") -> list["Output"]:
        """Write ``table`` and return one :class:`Output` per file written."""
        raise NotImplementedError


class HierarchyBuilder(Plugin):
    """Builds a generalization hierarchy for one column."""

    kind = "hierarchy"
    #: the parameter a scalar shorthand fills: ``age: {interval: [5, 10]}`` means widths: [5, 10].
    primary: ClassVar[str | None] = None
    #: parameters that name files, resolved against the workflow's folder; their content
    #: hash becomes part of the step's fingerprint.
    files: ClassVar[tuple[str, ...]] = ()

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: "StepContext") -> "Hierarchy":
        """Return the hierarchy of ``column`` given its distinct non-null ``values``."""
        raise NotImplementedError


class Partition:
    """Records grouped into classes, as a privacy check sees them in a lattice search.

    ``classes[r]`` is the class id (``0 .. n_classes - 1``) of record ``r`` of ``table``,
    ``sizes[c]`` the number of records of class ``c``. ``table`` holds the records' original
    values in the same order, with their typing (sensitive attributes, gradings) and
    hierarchies. :meth:`codes`, :meth:`counts` and :meth:`distinct` encode a column once and
    keep it in ``cache``; a lattice shares one cache across all its nodes, so a check encodes
    the sensitive attribute once per run, not once per node.

    ``classes`` may be given as a zero-argument callable: it is then computed on first use
    (a check that needs only ``sizes``, such as k-anonymity, never pays for it).

    ``weights``, when given, makes the partition *weighted*: row ``r`` of ``table`` stands for
    ``weights[r]`` records with the same values (a frequency table), ``sizes`` count records,
    and :meth:`counts` weighs each row. Only checks that declare
    :attr:`Metric.weighted_partitions` are given one.

    ``population``, when the search has a population table (a model parameter ``population``
    of kind ``step``, such as delta-presence's or k-map's), gives per class the number of
    population records whose quasi-identifiers generalize to the class's values at the same
    node (int64, aligned with ``sizes``); it may be a zero-argument callable, computed on first
    use. Without a population table it is None.
    """

    def __init__(self, classes: np.ndarray | Callable[[], np.ndarray], sizes: np.ndarray, table: TypedTable,
                 cache: dict[str, Any] | None = None, weights: np.ndarray | None = None,
                 population: np.ndarray | Callable[[], np.ndarray] | None = None) -> None:
        self._classes = classes
        self.sizes = sizes
        self.table = table
        self.cache = cache if cache is not None else {}
        self.weights = weights
        self._population = population

    @property
    def population(self) -> np.ndarray | None:
        """Per class, its population records (see the class docstring), or None."""
        if callable(self._population):
            self._population = self._population()
        return self._population

    @property
    def classes(self) -> np.ndarray:
        if callable(self._classes):
            self._classes = self._classes()
        return self._classes

    @property
    def classes_used(self) -> bool:
        """Whether :attr:`classes` was computed (it always is when given as an array)."""
        return not callable(self._classes)

    @property
    def n_classes(self) -> int:
        return int(len(self.sizes))

    def codes(self, column: str) -> tuple[np.ndarray, list[str]]:
        """``(codes, values)``: each record's value of ``column`` as an int64 code into
        ``values``, the column's distinct values as text in sorted order."""
        if column not in self.cache:
            if column not in self.table.columns:
                raise InputError(f"column {column!r} is not in the table")
            keys = value_keys(self.table.data.column(column))
            if keys.null_count:
                raise InputError(f"column {column!r} has missing values; a privacy check cannot count them")
            values = pc.unique(keys).sort()
            codes = pc.index_in(keys, value_set=values).to_numpy(zero_copy_only=False).astype(np.int64)
            self.cache[column] = (codes, values.to_pylist())
        return self.cache[column]

    def counts(self, column: str) -> np.ndarray:
        """``(n_classes, m)`` int64 matrix: the records of each class with each value of
        ``column`` (columns in the order of :meth:`codes`; rows weighted by :attr:`weights`)."""
        codes, values = self.codes(column)
        m = len(values)
        flat = np.bincount(self.classes * m + codes, weights=self.weights, minlength=self.n_classes * m)
        return flat.astype(np.int64, copy=False).reshape(self.n_classes, m)

    def distinct(self, column: str) -> np.ndarray:
        """Number of distinct values of ``column`` in each class (no ``n_classes x m`` matrix)."""
        codes, values = self.codes(column)
        pairs = np.unique(self.classes * len(values) + codes)
        return np.bincount(pairs // len(values), minlength=self.n_classes)


@dataclass(frozen=True)
class Output:
    """One file written by a publisher: its path, sha256 and, for a table, its number of rows
    (``rows=None`` for a file that is not a table, such as a manifest or a report; it is then
    shown and stored without a row count)."""

    path: str
    sha256: str
    rows: int | None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "rows": self.rows}


@dataclass
class RunInfo:
    """The record of the run a step belongs to, as far as it has gone (``ctx.run_info()``).

    Publish steps run after every evaluate step, so a publisher sees all metric values and
    thresholds. Everything here comes from the store; ``steps`` holds the steps recorded
    before the current one, in execution order.
    """

    #: the ``af_runs`` row: run_id, workflow, workflow_path, workflow_text, workflow_hash,
    #: seed, overrides, versions, status, started_at, ...
    run: dict[str, Any]
    #: ``af_step_runs`` rows in order (params, seed, fingerprint, inputs, output_hash, ...)
    steps: list[dict[str, Any]]
    #: ``"<step>.<value>" -> value``, in step order
    metrics: dict[str, float]
    #: ``"<step>.<value>" -> {"min": x, "max": y}``: the thresholds of the evaluate steps
    thresholds: dict[str, dict[str, float]]
    #: one per source read: name, format, path (absolute), table, options, sha256, rows,
    #: columns (``[[name, DuckDB type], ...]``, without ``_row``), step (its step run)
    sources: list[dict[str, Any]]
    #: files written so far: step, path (absolute), sha256, rows
    outputs: list[dict[str, Any]]
    #: the step being run (name, kind, uses, plugin_version, params, seed, fingerprint,
    #: inputs, position), or None when the info was read back for a finished run
    current: dict[str, Any] | None
    workflow_dir: Path
    #: ``load(table_name)``: a stored table (step outputs' ``output_table``) as a TypedTable
    load: Callable[[str], TypedTable]
    #: ``sql(query, params=None, **arrow_tables)``, as ``StepContext.sql``
    sql: Callable[..., pa.Table]
    #: ``history()``: earlier successful runs of the same workflow (same name and file content)
    #: that started before this one, oldest first, each ``{"params": {"<step>.<param>":
    #: value, "seed": n}, "metrics": {...}}`` (no run ids).
    history: Callable[[], list[dict[str, Any]]] = lambda: []
    #: the plugin registry the run uses (an ``anonflow.registry.Registry``): ``has(kind, name)``,
    #: ``get(kind, name).obj``, ``names(kind)``; plugins look other plugins up here, never globally.
    registry: Any = None

    def step(self, name: str) -> dict[str, Any] | None:
        """The step run called ``name`` (None if it has not run)."""
        return next((s for s in self.steps if s["step"] == name), None)

    def params(self) -> dict[str, Any]:
        """This run's parameters, flat: ``{"seed": n, "<step>.<param>": value, ...}`` (every
        step but sources, after ``--set``) -- the form :attr:`history` uses."""
        return flat_params(self.steps, self.run["seed"])


def flat_params(steps: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """``{"seed": seed, "<step>.<param>": value}`` over the step runs (sources left out)."""
    out: dict[str, Any] = {"seed": seed}
    for s in steps:
        if s["kind"] == "source":
            continue
        for key, value in (s.get("params") or {}).items():
            out[f"{s['step']}.{key}"] = value
    return out


def _json_default(value: Any) -> Any:
    """numpy values as plain ones, for :meth:`StepContext.record_fitted`."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


@dataclass
class StepContext:
    """What the engine hands a plugin while it runs a step."""

    step: str
    seed: int
    rng: np.random.Generator
    workflow_dir: Path
    output_dir: Path
    #: run a SQL query against named Arrow tables in the store's DuckDB connection.
    sql: Callable[..., pa.Table]
    #: ``progress(total, label)`` returns a callable ``advance(n)``; quiet unless on a TTY.
    progress: Callable[[int, str], Callable[[int], None]] = lambda total, label="": (lambda n=1: None)
    #: the step's input tables, in the order the workflow lists them.
    inputs: list[TypedTable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: ``store_table(name, arrow_table)`` keeps a table in the store (publishers use it to
    #: publish into DuckDB) and returns the view it can be queried by.
    store_table: Callable[[str, pa.Table], str] | None = None
    #: ``derive(query, params=None, *, ordered=True, **tables)`` writes the query's records to
    #: the store and returns them as a stored (untyped) :class:`TypedTable`, read column by
    #: column when asked; keyword tables are visible by name as in :attr:`sql`. With
    #: ``ordered`` the query must yield ``_row`` in order (a projection, a filter, a
    #: ``POSITIONAL JOIN`` of same-length inputs), else the records are sorted by ``_row``.
    derive: Callable[..., TypedTable] | None = None
    #: ``discard(table)`` drops a derived table that will not be a step's output.
    discard: Callable[[TypedTable], None] = lambda table: None
    #: ``relation(query, rows=None, **tables)``: a query over stored tables as a stored table
    #: that is not written (a view, read when asked); for a publisher, a step's ordering.
    relation: Callable[..., TypedTable] | None = None
    #: ``copy_to(table, path, format=..., options=..., columns=...)`` writes a stored table with
    #: DuckDB's ``COPY`` (``csv`` or ``parquet``), in the table's order.
    copy_to: Callable[..., None] | None = None
    #: provider behind :meth:`run_info` (set by the runner)
    run_record: Callable[[], RunInfo] | None = None
    #: in an evaluate step given [original, anonymized]: how many of the original's records
    #: the algorithm suppressed (the metrics see only the published ones and their originals;
    #: a metric may count the suppressed ones, e.g. as fully lost).
    suppressed: int = 0
    #: for an algorithm that :meth:`~Algorithm.summarizes` a partitioned table: the sum of its
    #: fragments' summaries (an Arrow table), else None
    summary: Any = None
    #: the :class:`anonflow.outputs.OutputGuard` the runner sets: which paths may be written
    output_guard: Any = None
    #: provider behind :meth:`table` (set by the runner): a referenced step's table by name
    tables: Callable[[str], TypedTable] | None = None
    #: what the step fitted to its input, by name (:meth:`record_fitted`): JSON data, stored in
    #: the step's summary under ``fitted``
    fitted: dict[str, Any] = field(default_factory=dict)
    #: the plugin registry the run uses (see :attr:`RunInfo.registry`); plugins look other
    #: plugins up here, never globally.
    registry: Any = None

    def table(self, name: str) -> TypedTable:
        """The table of the source or step ``name``, which this step's plugin references by a
        parameter of kind ``step`` (``Param("population", "step")``): the workflow graph runs
        it first, and its content hash is part of this step's fingerprint. A name the step does
        not reference is refused."""
        if self.tables is None:
            raise RunError(f"step {self.step!r} references no other table (declare a parameter of kind 'step')")
        return self.tables(name)

    def run_info(self) -> RunInfo:
        """The current run's record so far: the run row, its step runs in order, metric
        values, thresholds, sources and files written (see :class:`RunInfo`)."""
        if self.run_record is None:
            raise RunError("this step runs outside a recorded run: no run information is available")
        return self.run_record()

    def note(self, message: str) -> None:
        """Record a remark in the step's summary (shown by ``anonflow runs RUN_ID``)."""
        self.notes.append(message)

    def record_fitted(self, name: str, value: Any) -> None:
        """Record ``value`` (JSON data: numbers, text, booleans, null, lists, mappings with
        text keys; numpy scalars and arrays are taken as their values) as what the step
        fitted to its input under ``name``: what it chose or computed from the records that
        is needed to apply its result to other records (the ``lattice``'s node, the MDAV
        family's standardization). The engine stores it in the step's summary (``fitted``);
        the ``release`` publisher carries an algorithm step's in the manifest, where
        ``anonflow apply`` reads it. NaN and infinities are refused: record a value exactly
        (a float is kept to the bit). In a partitioned run, a value every fragment group
        recorded alike is kept, one they recorded differently is dropped with a note."""
        if not isinstance(name, str) or not name:
            raise RunError(f"record_fitted: the name must be non-empty text, got {name!r}")
        try:
            self.fitted[name] = json.loads(json.dumps(value, allow_nan=False, default=_json_default))
        except (TypeError, ValueError) as exc:
            raise RunError(f"record_fitted({name!r}): not JSON data ({exc})") from None

    def resolve_output(self, path: str) -> Path:
        """An output path as given in the workflow, resolved inside the output folder.

        Raises :class:`InputError` for a path that is absolute, climbs out of the output folder
        (``..``, or a symbolic link leading out), would write over the store or a file the
        workflow reads, or names an existing file this store did not publish (see
        :mod:`anonflow.outputs`). Publishers must resolve every path they write through this."""
        guard = self.output_guard or OutputGuard(self.output_dir)
        return guard.resolve(path)


def check_destination(destination: str, what: str) -> list[str]:
    """Check ``destination`` (a URL, or a host) against the egress policy in force and return
    the hosts it reaches; raise :class:`InputError` (one line, the password never repeated)
    when it may not be reached or holds a password. ``what`` names the step for the message.
    Call it right before connecting (see :meth:`Publisher.destinations`)."""
    return current_egress().check_destination(destination, what)


def atomic_write(path: Path, write: Callable[[Path], None]) -> str:
    """Call ``write(tmp_path)`` then atomically rename onto ``path``; return the file's sha256.

    A failure inside ``write`` leaves no file at ``path`` (and no temporary file behind).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        digest = file_sha256(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return digest


class Engine(Protocol):
    """What a publisher's ``verify(release, ..., engine=...)`` and ``apply(release, ...,
    engine=...)`` may ask of the engine: the CLI passes its :class:`anonflow.session.Session`.
    A plugin reaches the engine only through this handle (never by importing it), as a
    datasette plugin is given the app.

    A workflow object (``spec``) is the engine's: a plugin reads its ``name``, ``seed``,
    ``sources`` (name -> ``name``, ``format``, ``path``, ``table``, ``options``,
    ``describe()``) and ``steps`` (name -> ``uses``, ``inputs``, ``params``), and may give
    :meth:`rerun` a copy with other source paths (``dataclasses.replace``)."""

    #: the plugin registry the engine runs with
    registry: Any

    def load_recorded(self, workflow: Path, *, seed: int | None = None, overrides: Iterable[Any] = ()) -> Any:
        """The recorded workflow written to the file ``workflow``, validated, with the recorded
        ``seed`` and ``--set`` values (``(step, param, value)``) applied as the recorded run
        applied them. Raises :class:`AnonflowError` (one line) when it cannot be loaded."""

    def rerun(self, spec: Any, *, db: Path, out: Path, history: list[dict[str, Any]] | None = None,
              egress: Any = None) -> Any:
        """Run ``spec`` (from :meth:`load_recorded`) without the step cache into the store file
        ``db`` and the output folder ``out``, under the egress policy ``egress``; ``history``:
        the recorded sweep points. Returns an object with ``result`` (the run's result:
        ``run_id``, ``status``, ``metrics``, ``outputs``, ``steps``) and ``not_replayed``
        (step name -> what it would have written outside the re-run's scratch folder)."""

    def rerun_policy(self) -> Any:
        """The egress policy a re-run of someone else's workflow runs under (anonflow.egress,
        docs/egress.md): no sink outside the re-run's scratch folder is replayed and credentials
        go only to hosts the person verifying named. Give it to :meth:`rerun` and
        :meth:`read_source` as ``egress``."""

    def read_source(self, source: Any, db: Path, *, egress: Any = None) -> tuple[str, int]:
        """Read a source of a spec from :meth:`load_recorded` (a database's table or query) into
        the scratch store file ``db`` as a run would, under the egress policy ``egress``; its
        content sha256 and record count."""

    def scratch_sql(self) -> ContextManager[Callable[..., Any]]:
        """A throw-away in-memory store's ``sql(query, params=None, **tables)`` for a ``with``
        block (what :class:`StepContext` ``sql`` gives a step)."""

    def prepare_batch(self, workflow_text: str, step: str, new_data: Path, scratch: Path, *,
                      seed: int | None = None, overrides: Iterable[tuple[str, str, Any]] = ()) -> TypedTable:
        """The table step ``step`` of the recorded workflow ``workflow_text`` reads, made from the
        file ``new_data`` by the recorded preparation steps (source, typing, filter, sample,
        hierarchy), run in a throw-away store; the files they read lie in ``scratch`` at their
        recorded relative paths."""

    def check_output_folder(self, out: Path) -> None:
        """Raise :class:`InputError` unless ``out`` may be written: it does not exist, or is
        an empty folder (not a link), in an existing folder."""

    def write_folder(self, out: Path, write: Callable[[Path], None]) -> None:
        """Write the folder ``out`` all or nothing: ``write(tmp)`` fills a temporary folder
        beside it, renamed to ``out`` once complete (removed on any failure)."""
