"""Helpers shared by the first-party plugins: the quasi-identifiers and the sensitive
attribute a method needs (with the error messages that say how to fix the typing), z-scores,
the plug-in :func:`entropy`, the missing-sensitive-value policy (:func:`missing_sensitive`,
:func:`real_distinct`, :func:`real_counts`) and :func:`join_nearest` (leftover records
joining the nearest class).

For metrics: :func:`sensitive_column` and :func:`grading_of` (the sensitive attribute a
metric reads and its sensitivity grading), :func:`typed_input` and :func:`check_sensitive`
(a metric's ``check``), :data:`EPS` (the tolerance of a frequency bound c <= alpha * n);
:func:`aligned` (two inputs hold the same records in ``_row`` order), :func:`numeric_columns`
(the columns a record-by-record numeric metric compares) and :func:`numeric_values` (those
columns as numbers, failing in one line on generalized labels).

For algorithms that change some columns of every record (microaggregation, perturbation):
:func:`replace_columns`."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import (CLASS, MISSING_CATEGORY, ROW, Grading, InputError, Partition, StepContext, TypedTable,
                          generalization, numeric_column, sql_ident)

from .distance import record_distances
from .encode import Continuous, Encoded


def continuous_quasi(table: TypedTable, plugin: str) -> list[str]:
    """The quasi-identifiers, all of which must be continuous for a numeric-only method."""
    quasi = table.typing.quasi
    if not quasi:
        raise InputError(f"{plugin} needs at least one quasi-identifier; name them under 'quasi' in the typing step")
    for name in quasi:
        attr = table.typing.get(name)
        if attr.type != "continuous":
            raise InputError(f"{plugin} works on numbers only, but quasi-identifier {name!r} is typed {attr.type}; "
                             f"type it continuous in the typing step (quasi: {{{name}: continuous}}) if its "
                             "values are numbers, or leave it out of the quasi-identifiers")
        if generalization(table, name):
            raise InputError(f"{plugin} works on numbers only, but quasi-identifier {name!r} holds generalized values "
                             f"(published as {generalization(table, name).get('kind')} labels by an earlier step); "
                             f"run {plugin} on the table before it was generalized")
    return quasi


def standardization(X: np.ndarray, names: Sequence[str],
                    domain: Mapping[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The means and population standard deviations (divisor n, ``numpy.std``'s default)
    :func:`zscores` standardizes the columns of ``X`` by: the columns' own, or with ``domain``
    (a fragment's ``TypedTable.domain``) the whole table's (DuckDB's ``avg`` and
    ``stddev_pop``)."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    if domain:
        for j, name in enumerate(names):
            dom = domain.get(name)
            if dom is not None and dom.mean is not None and dom.std is not None:
                mean[j], std[j] = dom.mean, dom.std
    return mean, std


def zscores(X: np.ndarray, names: Sequence[str], domain: Mapping[str, Any] | None = None) -> tuple[np.ndarray,
                                                                                                 list[str]]:
    """Standardize columns (population std); constant columns become 0 and are reported.
    ``domain`` (a fragment's ``TypedTable.domain``): the whole table's means and deviations."""
    mean, std = standardization(X, names, domain)
    constant = [n for n, s in zip(names, std) if s == 0]
    safe = np.where(std == 0, 1.0, std)
    return (X - mean) / safe, constant


def entropy(counts: np.ndarray) -> float:
    """Plug-in entropy in bits, -sum p log2 p, of the distribution given by ``counts`` (how
    often each value occurs; zeros are ignored, no counts give 0). MAASAE's Ent(G) of the
    sensitive values in a class (SPEC section 4, eq. 14) and the utility models' H(X) of a
    column (SPEC section 6; ``np.bincount`` of its codes) both use it."""
    c = np.asarray(counts, dtype=np.float64)
    c = c[c > 0]
    if c.size == 0:
        return 0.0
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def sensitive_attribute(table: TypedTable, plugin: str, given: str | None = None) -> str:
    """The one sensitive attribute (or ``given``), with a clear error otherwise."""
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: sensitive column {given!r} is not in the table")
        return given
    sens = table.typing.sensitive
    if not sens:
        raise InputError(f"{plugin} needs a sensitive attribute; name one under 'sensitive' in the typing step")
    if len(sens) > 1:
        raise InputError(f"{plugin} needs exactly one sensitive attribute, but the typing names {len(sens)}: "
                         f"{', '.join(sens)}; keep one under 'sensitive'")
    return sens[0]


def sensitive_codes(table: TypedTable, column: str, plugin: str) -> np.ndarray:
    """Codes of the sensitive values (in sort order of the values)."""
    col = table.column(column)
    if col.null_count:
        raise InputError(f"{plugin}: sensitive column {column!r} has {col.null_count} missing value(s); the typing "
                         "step's 'missing' policy must drop them or make them a category")
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr)
    order = pc.array_sort_indices(enc.dictionary).to_numpy().astype(np.int64)
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0])
    return rank[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]


# -- missing sensitive values -------------------------------------------------------------
#
# The policy (docs/algorithms.md, "Missing values"): a missing sensitive value is never a
# distinct value and never diversity. Under the typing step's ``missing: category`` a missing
# value of a text column is the category ``?`` (:data:`anonflow.schema.MISSING_CATEGORY`);
# the typing records that mode, so the marker is known from it, never guessed from the data.
# Under ``error`` and ``drop`` no missing value is left in a typed table.


def missing_marker(table: TypedTable) -> str | None:
    """The value standing for "missing" in the text columns of ``table`` (the category of
    ``missing: category``), or None when its typing left no missing value."""
    return MISSING_CATEGORY if table.typing.missing == "category" else None


def missing_sensitive(table: TypedTable, column: str) -> np.ndarray:
    """``(n,)`` bool: the records whose value of ``column`` is missing (the typing's marker)."""
    marker = missing_marker(table)
    col = table.column(column)
    if marker is None or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return np.zeros(table.num_rows, dtype=bool)
    return pc.fill_null(pc.equal(col, marker), False).to_numpy(zero_copy_only=False).astype(bool)


def _marker_code(partition: Partition, column: str) -> tuple[np.ndarray, list[str], int]:
    codes, values = partition.codes(column)
    marker = missing_marker(partition.table)
    j = values.index(marker) if marker is not None and marker in values else -1
    return codes, values, j


def real_distinct(partition: Partition, column: str) -> np.ndarray:
    """Distinct *real* values of ``column`` per class (a missing value is not one)."""
    codes, values, j = _marker_code(partition, column)
    if j < 0:
        return partition.distinct(column)
    m = len(values)
    pairs = np.unique(partition.classes * m + codes)
    pairs = pairs[pairs % m != j]
    return np.bincount(pairs // m, minlength=partition.n_classes)


def real_counts(partition: Partition, column: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(counts, real, values)``: the records of each class with each real value of ``column``
    (``(n_classes, m)``, columns in the order of ``values``), and each class's records with a
    real value (its size less its missing values)."""
    counts = partition.counts(column)
    _, values, j = _marker_code(partition, column)
    if j >= 0:
        counts = np.delete(counts, j, axis=1)
        values = values[:j] + values[j + 1:]
    return counts, counts.sum(axis=1), values


def join_nearest(enc: Encoded, labels: np.ndarray, pending: np.ndarray) -> int:
    """Put each record of ``pending`` (indices, in order) into the class of its nearest record
    that is already in one (``labels >= 0``): the record-to-record distance of SPEC section 4
    (Def. 8) on the encoded quasi-identifiers; ties go to the lowest position. Classes are
    those of the records placed before: a pending record joins no other pending record.
    Returns how many were placed (none when no record is in a class). Used for the records
    whose sensitive value is missing: they take no part in building classes, and joining a
    class never lowers its real distinct values or raises a real value's share c / r."""
    pending = np.asarray(pending, dtype=np.int64)
    classed = np.flatnonzero(labels >= 0)
    if not classed.size or not pending.size:
        return 0
    targets = labels[classed]
    # records with the same encoded QI values have the same distance row and the same choice:
    # one vectorized row per distinct QI tuple among the pending records, not one per record
    keys = np.column_stack([a.scaled[pending] if isinstance(a, Continuous) else a.codes[pending].astype(np.float64)
                            for a in enc.attributes]) if enc.attributes else np.zeros((pending.size, 1))
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    choice = np.empty(first.size, dtype=np.int64)
    for u, i in enumerate(pending[first].tolist()):
        choice[u] = targets[int(np.argmin(record_distances(enc, i, rows=classed)))]
    labels[pending] = choice[inverse.reshape(-1)]
    return int(pending.size)


# -- for metrics: the sensitive attribute and its grading ------------------------------------

#: tolerance of the frequency bound c <= alpha * n (alpha is a decimal such as 0.3).
EPS = 1e-9


def sensitive_column(table: TypedTable, given: str | None, plugin: str) -> str:
    """The sensitive attribute a plugin works on: ``given``, or the only one typed."""
    sens = table.typing.sensitive
    if given is not None:
        if given not in table.columns:
            raise InputError(f"{plugin}: parameter 'sensitive' = {given!r} is not a column of the table")
        return given
    if len(sens) == 1:
        return sens[0]
    if not sens:
        raise InputError(f"{plugin} needs a sensitive attribute; name it under 'sensitive' in the typing step")
    raise InputError(f"{plugin} works on one sensitive attribute, but the typing names {len(sens)} "
                     f"({', '.join(sens)}); choose one with the parameter 'sensitive'")


def grading_of(table: TypedTable, column: str, plugin: str) -> Grading:
    """The sensitivity grading the typing step attached to ``column``."""
    attr = table.typing.get(column) if column in table.typing else None
    data = attr.options.get("grading") if attr is not None else None
    if not data:
        raise InputError(f"{plugin} needs a sensitivity grading of {column!r}; declare it in the typing step: "
                         f"sensitive: {{{column}: {{grading: path/to/grading.yaml}}}}")
    return Grading.from_json(data)


def typed_input(tables: Mapping[str, Any]) -> TypedTable | None:
    """The table whose typing a metric's ``check`` reads: ``anonymized``, or -- when ``anonflow
    plan`` checks an evaluate step before anything has run -- ``typed``, the table the
    algorithm producing the anonymized input will receive (algorithms keep its typing)."""
    for key in ("anonymized", "typed"):
        if tables.get(key) is not None:
            return tables[key]
    return None


def check_sensitive(tables: Mapping[str, Any], params: Mapping[str, Any], plugin: str, *,
                    graded: bool = False) -> None:
    """A metric's ``check``: the typing names the sensitive attribute it needs (and, with
    ``graded``, that attribute carries a sensitivity grading)."""
    table = typed_input(tables)
    if table is None:
        return
    s = sensitive_column(table, params.get("sensitive"), plugin)
    if graded:
        grading_of(table, s, plugin)


# -- for metrics: records compared one to one ------------------------------------------------


def aligned(original: TypedTable, anonymized: TypedTable, metric: str, ctx: StepContext | None = None) -> None:
    """Both tables must hold the same records in the same (``_row``) order (checked in SQL
    when a context is given: the tables may be in the store)."""
    if ctx is not None and original.num_rows == anonymized.num_rows:
        r = sql_ident(ROW)
        odd = ctx.sql(f"SELECT count(*) AS n FROM o POSITIONAL JOIN a WHERE o.{r} IS DISTINCT FROM a.{r}",
                      o=original, a=anonymized).column(0)[0].as_py()
        same = odd == 0
    else:
        same = original.num_rows == anonymized.num_rows and np.array_equal(original.rows(), anonymized.rows())
    if not same:
        raise InputError(f"metric {metric!r} compares records one to one, but the two inputs hold different "
                         f"records ({original.num_rows} vs {anonymized.num_rows}); give it [original, anonymized] "
                         "from the same workflow")


def numeric_columns(original: TypedTable, anonymized: TypedTable, params: Mapping[str, Any], metric: str,
                    hint: str = "") -> list[str]:
    """The columns a record-by-record numeric metric compares.

    ``params["columns"]``, by default the continuous quasi-identifiers; both tables must hold
    the same records (:func:`aligned`) and every column.  ``hint`` ends the error message
    when there is no such column.
    """
    aligned(original, anonymized, metric)
    cols = params["columns"] or [a.name for a in original.typing.attributes
                                 if a.role == "quasi" and a.type == "continuous"]
    if not cols:
        raise InputError(f"{metric} needs numeric columns: no continuous quasi-identifier is typed{hint}")
    for c in cols:
        if c not in original.columns or c not in anonymized.columns:
            raise InputError(f"{metric}: column {c!r} is not in both tables")
    return cols


#: what a numeric metric given generalized labels suggests (see :func:`numeric_values`)
GENERALIZED_HINT = ("use a metric that reads generalized values (loss, generalization-rl, relative-loss, "
                    "reconstruction-distance with form: generalized), or leave {column!r} out of its columns:")
#: ... and given text in a column not marked generalized
TEXT_HINT = ("{column!r} is not numeric: name only numeric columns in its columns: (and type a column continuous "
             "only if it holds numbers); if its text is generalized values, use a metric that reads them (loss, "
             "generalization-rl, relative-loss)")


def numeric_values(table: TypedTable, columns: list[str], metric: str) -> np.ndarray:
    """The named columns as an ``(n, d)`` float64 array, through
    :func:`anonflow.generalization.numeric_column`: a column holding generalized labels (a
    ``lattice`` or ``l-clustering`` output) fails in one line that says which metric needs
    numbers and what to use instead."""
    out = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        hint = GENERALIZED_HINT if generalization(table, name) else TEXT_HINT
        out[:, j] = numeric_column(table, name, metric=metric, hint=hint)
    return out


def replace_columns(table: TypedTable, new: Mapping[str, pa.Array], classes: pa.Array,
                    ctx: StepContext | None = None) -> TypedTable:
    """``table`` with the columns ``new`` replaced (arrays in the table's record order) and
    ``classes`` as its ``_class`` column. A table in the store stays there: the new columns are
    joined to it by position (DuckDB ``POSITIONAL JOIN``), never read into memory whole."""
    gen = {**new, CLASS: classes}
    if ctx is not None and ctx.derive is not None and not table.loaded:
        select = ", ".join(f"g.{sql_ident(c)}" if c in new else f"t.{sql_ident(c)}"
                           for c in table.columns if c != CLASS)
        out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t POSITIONAL JOIN gen g",
                         base=table, gen=pa.table(gen))
        return TypedTable(None, table.typing, table.claims, table.hierarchies, stored=out.stored)
    data = table.data
    if CLASS in data.column_names:
        data = data.drop_columns([CLASS])
    for name, values in new.items():
        data = data.set_column(data.column_names.index(name), name, values)
    return table.replace(data=data.append_column(CLASS, classes))

