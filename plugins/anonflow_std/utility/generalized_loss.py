"""Loss metrics of hierarchy-free generalization (seed 001 Def. 6-12, SPEC section 5):
``generalization-loss`` (``L(D, D*)``) and ``relative-loss`` (``RL = L(D, D*) / L(D, D_c)``).

They compare [original, anonymized]: each original record's published value
(:func:`published_values`: read from the structured columns ``l-clustering`` publishes, or
induced from the data for any other published QI column) with its original value, in the QI
space of :mod:`anonflow_std.common.qi_space`, with the kernels of
:mod:`anonflow_std.common.generalized`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import ROW, InputError, Metric, Param, StepContext, TypedTable, generalization
from anonflow_std.common.generalized import Generalized, attribute_loss, covers

from .. import __version__
from ..common.qi_space import QISpace, qi_space

__all__ = ["GeneralizationLoss", "RelativeLoss", "published_values"]

_ONE = np.uint64(1)


def _positions(original: TypedTable, anonymized: TypedTable, metric: str) -> np.ndarray:
    """For each original record, its row in ``anonymized`` (-1: suppressed)."""
    for t, what in ((original, "original"), (anonymized, "anonymized")):
        if ROW not in t.columns:
            raise InputError(f"{metric}: the {what} table has no {ROW} column to align records by")
    orow, arow = original.rows().astype(np.int64), anonymized.rows().astype(np.int64)
    sorter = np.argsort(arow, kind="stable")
    sa = arow[sorter]
    if sa.size > 1 and np.any(sa[1:] == sa[:-1]):
        raise InputError(f"{metric}: the anonymized table holds a record twice")
    at = np.minimum(np.searchsorted(sa, orow), max(sa.size - 1, 0))
    found = (sa[at] == orow) if sa.size else np.zeros(orow.size, bool)
    if int(found.sum()) != arow.size:
        raise InputError(f"{metric} compares records one to one, but the anonymized table holds records that are not "
                         "in the original; give it [original, anonymized] from the same workflow")
    return np.where(found, sorter[at], -1)


def _column(table: TypedTable, name: str) -> pa.Array:
    col = table.data.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _group_codes(arr: pa.Array) -> tuple[np.ndarray, int]:
    """Group id of each published value (nulls form one group of their own)."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)


def published_values(space: QISpace, original: TypedTable, anonymized: TypedTable,
                     metric: str) -> tuple[Generalized, np.ndarray, list[str]]:
    """Each original record's published generalized value (aligned with ``space``'s records),
    which records were suppressed, and which QIs were read from structured columns.

    A QI whose typing in ``anonymized`` names structured columns (``l-clustering`` output) is
    read from them. Any other published QI column is interpreted by the data: a published
    value stands for the original values of the records that carry it -- the interval
    ``[min, max]`` of them for an ordered attribute, their set for an unordered one. For
    hierarchy generalization this is the node's leaves present in the data; for L-clustering
    it recovers the representatives exactly. A suppressed record (absent from
    ``anonymized``) counts as generalized to the whole domain.
    """
    pos = _positions(original, anonymized, metric)
    kept = pos >= 0
    n = pos.shape[0]
    dom = space.domain
    full = Generalized.full(dom)
    lo = np.repeat(full.lo, n, axis=0)
    hi = np.repeat(full.hi, n, axis=0)
    bits = np.repeat(full.bits, n, axis=0)
    structured: list[str] = []
    rows = pos[kept]
    for i, name in enumerate(dom.ordered_names):
        if name not in anonymized.columns:
            raise InputError(f"{metric}: quasi-identifier {name!r} is not in the anonymized table")
        info = generalization(anonymized, name)
        if info and info.get("kind") == "interval" and info["lo"] in anonymized.columns \
                and info["hi"] in anonymized.columns:
            structured.append(name)
            for buf, key in ((lo, "lo"), (hi, "hi")):
                arr = _column(anonymized, info[key])
                if arr.null_count:
                    raise InputError(f"{metric}: column {info[key]!r} has missing values")
                if name in space.ordinal_labels:
                    idx = pc.index_in(arr.cast(pa.string()), value_set=pa.array(space.ordinal_labels[name]))
                    if idx.null_count:
                        bad = pc.filter(arr, pc.is_null(idx))[0].as_py()
                        raise InputError(f"{metric}: {info[key]!r} holds {bad!r}, which is not a category of "
                                         f"{name!r}")
                    vals = idx.to_numpy(zero_copy_only=False).astype(np.float64)
                else:
                    vals = arr.to_numpy(zero_copy_only=False).astype(np.float64)
                buf[kept, i] = vals[rows]
        else:
            g, m = _group_codes(_column(anonymized, name))
            g = g[rows]
            v = space.values[kept, i]
            glo = np.full(m, np.inf)
            ghi = np.full(m, -np.inf)
            np.minimum.at(glo, g, v)
            np.maximum.at(ghi, g, v)
            lo[kept, i], hi[kept, i] = glo[g], ghi[g]
    W = dom.n_words
    for j, name in enumerate(dom.unordered_names):
        if name not in anonymized.columns:
            raise InputError(f"{metric}: quasi-identifier {name!r} is not in the anonymized table")
        info = generalization(anonymized, name)
        col = np.zeros((n, W), dtype=np.uint64)
        if info and info.get("kind") == "set" and info["set"] in anonymized.columns:
            structured.append(name)
            arr = _column(anonymized, info["set"])
            if arr.null_count:
                raise InputError(f"{metric}: column {info['set']!r} has missing values")
            flat = pc.list_flatten(arr)
            parent = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
            code = pc.index_in(flat.cast(pa.string()), value_set=pa.array(space.categories[j]))
            if code.null_count:
                bad = pc.filter(flat, pc.is_null(code))[0].as_py()
                raise InputError(f"{metric}: {info['set']!r} holds {bad!r}, which is not a value of {name!r} in the "
                                 "original table")
            c = code.to_numpy(zero_copy_only=False).astype(np.int64)
            pub = np.zeros((anonymized.num_rows, W), dtype=np.uint64)
            np.bitwise_or.at(pub, (parent, c >> 6), np.left_shift(_ONE, (c & 63).astype(np.uint64)))
            if anonymized.num_rows and np.any(~pub.any(axis=1)):
                raise InputError(f"{metric}: column {info['set']!r} holds an empty set")
            col[kept] = pub[rows]
        else:
            g, m = _group_codes(_column(anonymized, name))
            g = g[rows]
            c = space.codes[kept, j]
            gb = np.zeros((m, W), dtype=np.uint64)
            np.bitwise_or.at(gb, (g, c >> 6), np.left_shift(_ONE, (c & 63).astype(np.uint64)))
            col[kept] = gb[g]
        if (~kept).any():
            col[~kept] = full.bits[0, j]
        bits[:, j, :] = col
    return Generalized(lo, hi, bits), ~kept, structured


class _LossMetric(Metric):
    category = "utility"
    requires_original = True
    params = (
        Param("weights", "dict", default=None, nullable=True,
              help="quasi-identifier -> weight >= 0 (default 1 each; seed 001 Def. 9)"),
        Param("resolution", "dict", default=None, nullable=True,
              help="continuous quasi-identifier -> resolution unit (default: the one the algorithm recorded, "
                   "else 1 for integers, else the decimal step)"),
    )

    def losses(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
               ctx: StepContext) -> dict[str, Any]:
        if original is None:
            raise InputError(f"{self.name} compares [original, anonymized]; give the evaluate step both tables")
        resolution = dict(params.get("resolution") or {})
        for q in original.typing.quasi:
            info = generalization(anonymized, q)
            if q not in resolution and info and info.get("kind") == "interval" \
                    and original.typing.get(q).type == "continuous" and "res" in info:
                resolution[q] = info["res"]
        space = qi_space(original, params.get("weights"), resolution, plugin=self.name)
        records = space.records()
        published, suppressed, structured = published_values(space, original, anonymized, self.name)
        ok = covers(records, published)
        if not np.all(ok):
            bad = int(np.flatnonzero(~ok)[0])
            one, pub = records[[bad]], published[[bad]]
            lo_bad = np.flatnonzero((pub.lo[0] > one.lo[0]) | (pub.hi[0] < one.hi[0]))
            names = [space.domain.ordered_names[i] for i in lo_bad] + [
                space.domain.unordered_names[j] for j in np.flatnonzero(np.any(one.bits[0] & ~pub.bits[0], axis=-1))]
            raise InputError(f"{self.name}: the published value of {names[0]!r} for record {ROW} = "
                             f"{int(original.rows()[bad])} does not generalize its original value")
        l_ord, l_un = attribute_loss(records, published, space.domain)
        per_attr = np.concatenate([l_ord.sum(axis=0) * space.domain.w_ord, l_un.sum(axis=0) * space.domain.w_unord])
        loss = float(per_attr.sum())
        full = Generalized.full(space.domain)
        f_ord, f_un = attribute_loss(records, full, space.domain)
        total = float((f_ord @ space.domain.w_ord).sum() + (f_un @ space.domain.w_unord).sum())
        if len(structured) < len(space.names):
            induced = [q for q in space.names if q not in structured]
            ctx.note(f"{self.name}: published values of {', '.join(induced)} read as the original values they stand "
                     "for (no structured columns)")
        return {"loss": loss, "full": total, "suppressed": int(suppressed.sum()), "per_attr": dict(zip(space.domain.names, per_attr.tolist()))}


class GeneralizationLoss(_LossMetric):
    name = "generalization-loss"
    version = __version__
    description = ("Information loss L(D, D*) of generalization: sum over records and QIs of the weighted "
                   "interval-width / set-size ratios (seed 001 Def. 6-10; SPEC section 5).")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        r = self.losses(original, anonymized, params, ctx)
        n = len(original.rows()) if original is not None else 0
        out = {"generalization-loss": r["loss"], "generalization-loss.per_record": r["loss"] / n if n else 0.0,
               "generalization-loss.full": r["full"], "generalization-loss.suppressed": float(r["suppressed"])}
        out.update({f"generalization-loss.{q}": v for q, v in r["per_attr"].items()})
        return out


class RelativeLoss(_LossMetric):
    name = "relative-loss"
    version = __version__
    description = ("Relative loss RL = L(D, D*) / L(D, D_c), D_c = every QI generalized to its whole domain "
                   "(seed 001 Def. 11-12), as a fraction in [0, 1].")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        r = self.losses(original, anonymized, params, ctx)
        rl = r["loss"] / r["full"] if r["full"] > 0 else 0.0
        return {"relative-loss": rl, "relative-loss.percent": 100.0 * rl, "relative-loss.loss": r["loss"],
                "relative-loss.full": r["full"]}


PLUGINS = [GeneralizationLoss(), RelativeLoss()]
