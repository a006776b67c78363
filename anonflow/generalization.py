"""Publishing generalized values: one convention for every algorithm that generalizes.

**The convention.** An algorithm that publishes a quasi-identifier generalized (an interval
for a number, a set of categories, a hierarchy node) publishes it as follows:

* the column keeps its name and holds **text labels**, one per record (``[30-39]``,
  ``{China,India}``, ``*``): what a reader of the published file sees;
* the attribute keeps its **role and type**: an ``age`` typed ``continuous`` stays typed
  ``continuous`` -- the type says what the values are, not how they are published;
* ``Attribute.options["generalized"]`` (:data:`OPTION`) says **how to read the labels**:

  - ``{"kind": "interval", "lo": "<col>", "hi": "<col>", ...}``: each label is an interval,
    and its bounds are in the structured columns ``lo`` and ``hi`` of the same table (numbers
    for a continuous attribute, category strings for an ordinal one);
  - ``{"kind": "set", "set": "<col>"}``: each label is a set of categories, listed in the
    structured column ``set`` (``list<string>``);
  - ``{"kind": "hierarchy"}``: each label is a label of the table's hierarchy for that
    column (``TypedTable.hierarchies[column]``), at any of its levels (what the ``lattice``
    publishes);

  other keys may be added (``l-clustering`` records the ordered loss's resolution, ``res``);
* a **suppressed cell** (a value withheld, not generalized) is published as null and, as in
  sdcMicro, matches any value when classes are counted (``anonflow_std.privacy.wildcard``).
  What every privacy check and risk measure does with it -- count it as a wildcard, or refuse
  the table in one line, never count it as a value of its own -- is listed in one place:
  docs/algorithms.md, "Suppressed cells as wildcards".

Labels are rendered one way: :func:`interval_label` (``[lo-hi]``; a single value when
``lo == hi``; integral numbers without ``.0``; an ordinal interval ``[low..high]``) and
:func:`set_label` (``{a,b}`` sorted by text; a single category bare). The vectorized
:func:`interval_labels` and :func:`set_labels` give the same strings for whole columns.

A consumer asks :func:`generalization` how a column was published, and a metric that needs
numbers reads a column with :func:`numeric_column`, which returns float64 values or fails in
one line when the column holds labels instead of numbers.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError
from .schema import Attribute, Typing
from .table import TypedTable

__all__ = ["OPTION", "KINDS", "format_number", "interval_label", "interval_labels", "set_label", "set_labels",
           "generalized_attribute", "mark_generalized", "generalization", "structured_columns", "numeric_column"]

#: the key of ``Attribute.options`` that marks a column published generalized
OPTION = "generalized"
#: the kinds of generalized values, and the keys each requires beside ``kind``
KINDS: dict[str, tuple[str, ...]] = {"interval": ("lo", "hi"), "set": ("set",), "hierarchy": ()}

_ORDINAL_SEP = ".."
_NUMBER_SEP = "-"


# -- labels ---------------------------------------------------------------------------------


def _format_array(v: np.ndarray) -> np.ndarray:
    """Shortest round-trip strings of float64 values; integral values without ``.0``."""
    v = np.asarray(v, dtype=np.float64)
    integral = (v == np.floor(v)) & (np.abs(v) < 2.0**53)
    as_int = np.where(integral, v, 0).astype(np.int64).astype(str)
    return np.where(integral, as_int, v.astype(str))


def format_number(x: float) -> str:
    """A number as a label shows it: ``30``, not ``30.0``; otherwise the shortest text that
    reads back as the same float64 (``52.5``, ``0.1``, ``1e-05``)."""
    return str(_format_array(np.asarray([x], dtype=np.float64))[0])


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def interval_label(lo: Any, hi: Any, *, sep: str | None = None) -> str:
    """The label of the interval ``[lo, hi]``: ``[30-39]``, or the single value (``30``)
    when ``lo == hi``. Numbers are shown by :func:`format_number`; bounds given as text
    (an ordinal attribute's categories) are shown as they are, between ``..``:
    ``[Bachelors..Masters]``. ``sep`` overrides the separator."""
    if _is_number(lo) and _is_number(hi):
        if math.isnan(float(lo)) or math.isnan(float(hi)):
            raise ValueError("an interval bound is NaN")
        slo, shi, default = format_number(float(lo)), format_number(float(hi)), _NUMBER_SEP
        same = float(lo) == float(hi)
    else:
        slo, shi, default = str(lo), str(hi), _ORDINAL_SEP
        same = slo == shi
    return slo if same else f"[{slo}{default if sep is None else sep}{shi}]"


def interval_labels(lo: Sequence[Any] | np.ndarray, hi: Sequence[Any] | np.ndarray, *,
                    sep: str | None = None) -> np.ndarray:
    """:func:`interval_label` of each pair of bounds (an object array of ``str``), vectorized:
    numeric bounds (float64) or text bounds (an ordinal attribute's categories)."""
    lo_a, hi_a = np.asarray(lo), np.asarray(hi)
    if lo_a.shape != hi_a.shape:
        raise ValueError(f"interval_labels: {lo_a.shape[0]} lower bounds for {hi_a.shape[0]} upper bounds")
    if lo_a.dtype.kind in "iufb" and hi_a.dtype.kind in "iufb":
        lo_f, hi_f = lo_a.astype(np.float64), hi_a.astype(np.float64)
        if np.isnan(lo_f).any() or np.isnan(hi_f).any():
            raise ValueError("an interval bound is NaN")
        slo, shi, same, default = _format_array(lo_f), _format_array(hi_f), lo_f == hi_f, _NUMBER_SEP
    else:
        slo, shi = lo_a.astype(str), hi_a.astype(str)
        same, default = slo == shi, _ORDINAL_SEP
    both = np.strings.add(np.strings.add(np.strings.add("[", slo), default if sep is None else sep),
                          np.strings.add(shi, "]"))
    return np.where(same, slo, both).astype(object)


def set_label(values: Iterable[Any]) -> str:
    """The label of a set of categories: ``{China,India}`` (members as text, sorted, each
    once), or the single member bare (``China``)."""
    members = sorted({str(v) for v in values})
    if not members:
        raise ValueError("set_label: an empty set has no label")
    return members[0] if len(members) == 1 else "{" + ",".join(members) + "}"


def set_labels(sets: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`set_label` of each entry of a ``list<string>`` Arrow column whose lists are
    already sorted and free of repeats (as the ``set`` column of the convention is), in
    Arrow: a ``string`` array."""
    if isinstance(sets, pa.ChunkedArray):
        sets = sets.combine_chunks()
    joined = pc.binary_join(sets, ",")
    single = pc.equal(pc.list_value_length(sets), 1)
    braced = pc.binary_join_element_wise("{", joined, "}", "")
    return pc.if_else(single, joined, braced).cast(pa.string())


# -- the marking ----------------------------------------------------------------------------


def generalized_attribute(attr: Attribute, kind: str, **info: Any) -> Attribute:
    """``attr`` (role and type kept) with ``options["generalized"] = {"kind": kind, **info}``."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of generalized value {kind!r}; expected one of {', '.join(KINDS)}")
    missing = [k for k in KINDS[kind] if not isinstance(info.get(k), str)]
    if missing:
        raise ValueError(f"a generalized {kind} needs the column name(s) {', '.join(repr(k) for k in missing)}")
    return Attribute(attr.name, attr.role, attr.type, attr.order, attr.weights, attr.source,
                     {**attr.options, OPTION: {"kind": kind, **info}})


def mark_generalized(typing: Typing, column: str, kind: str, **info: Any) -> Typing:
    """The typing with ``column`` marked as published generalized: ``kind`` is
    ``"interval"`` (give ``lo=`` and ``hi=``, the bound columns), ``"set"`` (give ``set=``,
    the member column) or ``"hierarchy"``; further keyword arguments are recorded too. The
    attribute keeps its role and type.

    The structured columns the marking names are declared too, when the typing does not
    declare them yet: ``Attribute(name, "insensitive", options={"structured": column})``,
    appended in the order given (the engine refuses an algorithm's output column that its
    typing does not declare)."""
    if column not in typing:
        raise ValueError(f"mark_generalized: column {column!r} has no typing")
    attrs = [generalized_attribute(a, kind, **info) if a.name == column else a for a in typing.attributes]
    for name in KINDS[kind]:
        if info[name] not in typing:
            attrs.append(Attribute(info[name], "insensitive", None, options={"structured": column}))
    return typing.replace(attrs)


def generalization(table_or_typing: TypedTable | Typing, column: str) -> dict[str, Any] | None:
    """How ``column`` was published generalized (a copy of its ``options["generalized"]``:
    ``{"kind": ...}``), or None when it holds its values as they are (or has no typing)."""
    typing = table_or_typing.typing if isinstance(table_or_typing, TypedTable) else table_or_typing
    if column not in typing:
        return None
    info = typing.get(column).options.get(OPTION)
    return dict(info) if isinstance(info, dict) else None


def structured_columns(table_or_typing: TypedTable | Typing, column: str) -> list[str]:
    """The structured columns the marking of ``column`` names (``[lo, hi]`` of an interval,
    ``[set]`` of a set; none for a hierarchy label or an unmarked column)."""
    info = generalization(table_or_typing, column) or {}
    return [info[k] for k in KINDS.get(str(info.get("kind")), ()) if isinstance(info.get(k), str)]


# -- reading numbers ------------------------------------------------------------------------

#: what :func:`numeric_column` suggests when no ``hint`` is given
DEFAULT_HINT = ("use a metric that reads generalized values, or give this one tables whose {column!r} holds "
                "numbers (e.g. compare the original with a numeric release)")


def _how_published(table: TypedTable, column: str) -> str:
    info = generalization(table, column)
    if not info:
        return ""
    kind = info.get("kind")
    if kind == "hierarchy":
        return ", published generalized as labels of its hierarchy"
    if kind == "interval":
        return f", published generalized as intervals with bounds in {info.get('lo')!r} and {info.get('hi')!r}"
    if kind == "set":
        return f", published generalized as sets listed in {info.get('set')!r}"
    return f", published generalized ({kind})"


def _fail(table: TypedTable, column: str, metric: str, holds: str, sample: Any, hint: str | None) -> InputError:
    """The one-line error of :func:`numeric_column`."""
    attr = table.typing.get(column) if column in table.typing else None
    typed = f"typed {attr.type}" if attr is not None and attr.type else "untyped"
    what = (hint if hint is not None else DEFAULT_HINT).format(column=column, metric=metric)
    return InputError(f"column {column!r} is {typed} but holds {holds} ({sample!r}{_how_published(table, column)}), "
                      f"and {metric} needs numbers: {what}")


def numeric_column(table: TypedTable, column: str, *, metric: str, hint: str | None = None) -> np.ndarray:
    """``column`` of ``table`` as float64 values (a null -- a suppressed cell -- is NaN).

    Numbers are converted; text is accepted when every value reads as a number (a hierarchy's
    level-0 labels). Anything else -- generalized labels such as ``[30-39]`` or ``*``, dates,
    lists -- raises :class:`~anonflow.errors.InputError` with one line: the column, its type,
    a value it holds, how it was published (:func:`generalization`), which ``metric`` needs
    numbers, and what to do (``hint``, by default :data:`DEFAULT_HINT`; ``{column}`` and
    ``{metric}`` in it are filled in)."""
    if column not in table.columns:
        raise InputError(f"{metric}: column {column!r} is not in the table")
    col = table.column(column)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_null(t):
        return np.full(len(arr), np.nan)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        return np.asarray(pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        values = arr.drop_null()
        raise _fail(table, column, metric, f"{t} values", values[0].as_py() if len(values) else None, hint)
    try:
        return np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    # Arrow's parser is stricter than Python's (spaces, "1_000"): read each distinct value once
    distinct = pc.unique(arr)
    numbers: list[float] = []
    texts: list[str] = []
    for v in distinct.to_pylist():
        if v is None:
            continue
        try:
            numbers.append(float(v))
        except ValueError:
            raise _fail(table, column, metric, "text", v, hint) from None
        texts.append(v)
    idx = pc.fill_null(pc.index_in(arr, value_set=pa.array(texts, type=arr.type)), -1)
    idx = np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int64)
    out = np.full(len(arr), np.nan)
    out[idx >= 0] = np.asarray(numbers, dtype=np.float64)[idx[idx >= 0]]
    return out
