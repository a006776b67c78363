"""Hierarchy builders: ARX-format files, numeric intervals, code masking, inline taxonomies."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from anonflow.api import Hierarchy, HierarchyBuilder, InputError, Param, StepContext, value_keys

from .. import __version__


class ArxFile(HierarchyBuilder):
    name = "arx"
    version = __version__
    description = "Read an ARX hierarchy file: one row per value, one column per level, no header."
    primary = "file"
    files = ("file",)
    params = (
        Param("file", "str", help="the CSV file, relative to the workflow file"),
        Param("delimiter", "str", default=";", help="field separator (ARX uses ';')"),
    )

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: StepContext) -> Hierarchy:
        path = params["file"]
        try:
            table = pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                parse_options=pacsv.ParseOptions(delimiter=params["delimiter"]),
                convert_options=pacsv.ConvertOptions(column_types=None, strings_can_be_null=False,
                                                     auto_dict_encode=False, include_missing_columns=False,
                                                     timestamp_parsers=[]),
            )
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"cannot read hierarchy file {path}: {str(exc).splitlines()[0]} "
                             "(every row must have the same number of levels)") from None
        levels = [pc.utf8_trim(pc.cast(table.column(i), pa.string()), "\r") for i in range(table.num_columns)]
        return Hierarchy.from_levels(column, levels, builder=self.name)


class Intervals(HierarchyBuilder):
    name = "interval"
    version = __version__
    description = "Numbers into nested intervals: one bin width per level, then '*'."
    primary = "widths"
    params = (
        Param("widths", "list", items="float", help="bin width per level, each a multiple of the previous"),
        Param("anchor", "float", default=None, nullable=True,
              help="where bins start (default: the smallest value, rounded down to the first width)"),
    )

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: StepContext) -> Hierarchy:
        widths = [float(w) for w in params["widths"]]
        if not widths or any(w <= 0 for w in widths):
            raise InputError(f"interval widths must be positive numbers, got {params['widths']}")
        for a, b in zip(widths, widths[1:]):
            ratio = b / a
            if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
                raise InputError(f"interval widths must nest: {b:g} is not a multiple of {a:g}")
        if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
            raise InputError(f"an interval hierarchy needs a numeric column; {column!r} holds {values.type}")
        x = values.to_numpy(zero_copy_only=False).astype(np.float64)
        anchor = params["anchor"] if params["anchor"] is not None else math.floor(x.min() / widths[0]) * widths[0]
        levels = [value_keys(values)]
        integral = bool(np.all(np.mod(x, 1) == 0)) and all(float(w).is_integer() for w in widths) \
            and float(anchor).is_integer()
        for w in widths:
            lo = anchor + np.floor((x - anchor) / w) * w
            hi = lo + w
            if not bool(np.all((lo <= x) & (x < hi))):  # floating point lost the bins (a huge anchor, say)
                bad = int(np.flatnonzero(~((lo <= x) & (x < hi)))[0])
                raise InputError(f"interval width {w:g} with anchor {anchor:g} cannot be computed exactly: the value "
                                 f"{x[bad]:g} would land in [{lo[bad]:g}, {hi[bad]:g}); choose an anchor near the data")
            levels.append(pa.array(_labels(lo, hi, integral)))
        levels.append(pa.array(["*"] * len(x)))
        return Hierarchy.from_levels(column, levels, builder=self.name)


def _labels(lo: np.ndarray, hi: np.ndarray, integral: bool) -> list[str]:
    """``[lo-hi)`` labels, computed once per distinct bin."""
    pairs, inverse = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    fmt = (lambda v: str(int(v))) if integral else (lambda v: f"{v:g}")
    text = [f"[{fmt(a)}-{fmt(b)})" for a, b in pairs]
    if len(set(text)) != len(text):  # two bins printed alike would be merged by their label
        raise InputError("interval labels would not tell some bins apart at this precision (e.g. "
                         f"{next(t for t in text if text.count(t) > 1)}); use widths and an anchor near the data")
    return [text[i] for i in inverse.ravel()]


class Masking(HierarchyBuilder):
    name = "mask"
    version = __version__
    description = "Codes masked one more trailing symbol per level (12555 -> 1255* -> 125** ...)."
    primary = "levels"
    params = (
        Param("levels", "int", default=None, nullable=True, min=1,
              help="how many symbols to mask at most (default: all, the top level is all masked)"),
        Param("symbol", "str", default="*", help="the masking symbol"),
    )

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: StepContext) -> Hierarchy:
        codes = value_keys(values)
        lengths = pc.utf8_length(codes)
        lo, hi = pc.min(lengths).as_py(), pc.max(lengths).as_py()
        if lo != hi:
            odd = pc.filter(codes, pc.not_equal(lengths, hi))[0].as_py()
            raise InputError(f"a masking hierarchy needs codes of one length; {column!r} has {hi}-symbol codes "
                             f"and {odd!r}")
        depth = min(params["levels"] or hi, hi)
        sym = params["symbol"]
        levels = [codes] + [pc.binary_join_element_wise(pc.utf8_slice_codeunits(codes, 0, hi - i),
                                                        pa.scalar(sym * i), "") for i in range(1, depth + 1)]
        return Hierarchy.from_levels(column, levels, builder=self.name)


class Taxonomy(HierarchyBuilder):
    name = "taxonomy"
    version = __version__
    description = "A taxonomy written inline: nested mappings, leaves in lists; '*' on top."
    primary = "tree"
    params = (Param("tree", "any", help="e.g. {Europe: {West: [France, Germany]}, Asia: [China, India]}"),)

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: StepContext) -> Hierarchy:
        paths: list[list[str]] = []

        def walk(node: Any, ancestors: list[str]) -> None:
            if isinstance(node, Mapping):
                for key, child in node.items():
                    walk(child, [str(key), *ancestors])
            elif isinstance(node, list):
                for leaf in node:
                    if isinstance(leaf, (Mapping, list)):
                        walk(leaf, ancestors)
                    else:
                        paths.append([str(leaf), *ancestors])
            else:
                paths.append([str(node), *ancestors])

        if not isinstance(params["tree"], (Mapping, list)):
            raise InputError("a taxonomy is a mapping of groups to their members, or a list of values")
        walk(params["tree"], [])
        if not paths:
            raise InputError("the taxonomy has no leaves")
        depth = max(len(p) for p in paths)
        # a shallow leaf keeps its own value on the extra lower levels, so every level above
        # is shared with deeper branches of the same height
        rows = [[p[0]] * (depth - len(p)) + p + ["*"] for p in paths]
        levels = [pa.array([r[i] for r in rows]) for i in range(depth + 1)]
        return Hierarchy.from_levels(column, levels, builder=self.name)


PLUGINS = [ArxFile(), Intervals(), Masking(), Taxonomy()]
