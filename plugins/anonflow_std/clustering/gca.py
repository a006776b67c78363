"""Greedy clustering for (alpha,k)- and sensitivity-graded (alpha_i,k)-anonymity (SPEC section 7,
seed 002's (alpha_i,k)-GCA), published lossy-join style.

The algorithms group records; they generalize nothing. The output keeps every quasi-identifier
exact and adds ``_class``: it is meant to be published as a QI table and an SA table joined on
the class id (the ``lossy-join`` publisher). Records that fit in no class get a null
``_class``; the engine counts them, reports them and keeps them in a table of their own.

:func:`gca_partition` is the algorithm on plain arrays (bucket of each record, level of each
bucket, alpha of each level); the plugins map a typed table onto it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, Algorithm, InputError, Param, StepContext, TypedTable, suppression_limit
from anonflow_std.common.distance import record_distances
from anonflow_std.common.encode import Encoded, encode

from .. import __version__
from ..common.columns import EPS, grading_of, join_nearest, missing_marker, missing_sensitive, sensitive_column

CHOICES = ("nearest", "random", "first")


def gca_partition(bucket_of: np.ndarray, level: np.ndarray, level_alpha: np.ndarray, k: int, *,
                  per: str = "value", choice: str = "nearest", enc: Encoded | None = None,
                  rng: np.random.Generator | None = None,
                  progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """Group records for (alpha_i,k)-anonymity; return (class label per record, -1 = suppressed; stats).

    :param bucket_of: ``(n,)`` bucket (sensitive value) of each record, ``0..B-1``.
    :param level: ``(B,)`` level of each bucket, ``1..lambda`` (1 = most sensitive); all 1 for
        (alpha,k).
    :param level_alpha: ``(lambda + 1,)`` alpha of each level (index 0 unused).
    :param per: ``value`` bounds each value's count, ``level`` each level's count.
    :param choice: which record a bucket gives: ``nearest`` (QI distance to the class's first
        record, needs ``enc``; ties: lowest position), ``random`` (``rng``) or ``first``
        (lowest position: seed 002's worked example).

    Steps (SPEC section 7): (1) buckets by value, priority = more sensitive level, then larger
    bucket, then lower position of the bucket's first remaining record; (2) while at least k
    buckets are non-empty, start a class with a record of the highest-priority bucket, then
    walk the levels from least to most sensitive (cyclically), taking one record from the
    highest-priority unused bucket of each level, never from the first record's level unless
    no other level has an unused bucket, until the class satisfies the bound and has k
    records; a class that cannot be completed is abandoned (its records go back) and its
    first bucket no longer starts classes; (3) leftover records, bucket by bucket in priority
    order, join a class that still satisfies the bound after adding them, preferring classes
    without a record of their level, then the class whose most sensitive level is farthest
    from theirs, then the lowest class id; (4) the rest are suppressed (label -1).

    ``per: level`` changes step 2 in three ways, because a level's values count together:
    the walk passes over a level whose count would exceed its bound at the new class size
    (taking the first record's level next if it has room, and the first passed-over level
    only if no level has room); a bucket already in the class may give a second record when
    its level has no unused bucket; and a class is abandoned once it reaches
    ``4 * max(k, ceil(1 / min alpha_i))`` records without satisfying the bound.
    """
    bucket_of = np.asarray(bucket_of, dtype=np.int64)
    level = np.asarray(level, dtype=np.int64)
    level_alpha = np.asarray(level_alpha, dtype=np.float64)
    n = int(bucket_of.shape[0])
    B = int(level.shape[0])
    lam = int(level_alpha.shape[0]) - 1
    if choice == "nearest" and enc is None:
        raise ValueError("choice 'nearest' needs the encoded quasi-identifiers")
    if choice == "random" and rng is None:
        raise ValueError("choice 'random' needs a random generator")
    alpha_b = level_alpha[level]
    counts = np.bincount(bucket_of, minlength=B).astype(np.int64)
    order = np.argsort(bucket_of, kind="stable")  # records of each bucket in position order
    bounds = np.concatenate([[0], np.cumsum(counts)])
    members = [order[bounds[b]:bounds[b + 1]].copy() for b in range(B)]
    size = counts.copy()
    big = n + 1
    head = np.array([m[0] if m.size else big for m in members], dtype=np.int64)
    level_mask = {lv: level == lv for lv in range(1, lam + 1)}
    labels = np.full(n, -1, dtype=np.int64)

    # bucket priority as one int64 key (smaller = higher priority): level, then larger
    # bucket, then lower position of its first remaining record
    span = n + 2
    exact = (lam + 1) * span * span < 2 ** 62
    key = (level * span + (n - size)) * span + head if exact else np.zeros(B, dtype=np.int64)
    never = np.iinfo(np.int64).max

    def rekey(b: int) -> None:
        if exact:
            key[b] = (level[b] * span + (n - size[b])) * span + head[b]

    def best(mask: np.ndarray) -> int:
        """Highest-priority bucket among ``mask``."""
        if exact:
            return int(np.argmin(np.where(mask, key, never)))
        cand = np.flatnonzero(mask)
        return int(cand[np.lexsort((head[cand], -size[cand], level[cand]))[0]])

    def pick(b: int, first: int | None) -> int:
        """Position (in ``members[b]``) of the record bucket ``b`` gives to a class."""
        if choice == "random":
            return int(rng.integers(size[b]))  # type: ignore[union-attr]
        if choice == "first" or first is None:
            return 0
        d = record_distances(enc, first, rows=members[b][:size[b]])  # type: ignore[arg-type]
        return int(np.argmin(d))  # first minimum: members are in position order

    def remove(b: int, p: int) -> None:
        s = int(size[b])
        arr = members[b]
        arr[p:s - 1] = arr[p + 1:s]
        size[b] = s - 1
        head[b] = arr[0] if s > 1 else big
        rekey(b)

    def satisfied(ne: int, amin: float, lc: np.ndarray | None) -> bool:
        if ne < k:
            return False
        if lc is None:  # per value: every value of the class occurs once
            return amin * ne >= 1.0 - EPS
        return bool(np.all(lc[1:] <= level_alpha[1:] * ne + EPS))

    def restore(b: int, rec: int) -> None:
        s = int(size[b])
        arr = members[b]
        pos = int(np.searchsorted(arr[:s], rec))
        arr[pos + 1:s + 1] = arr[pos:s]
        arr[pos] = rec
        size[b] = s + 1
        head[b] = arr[0]
        rekey(b)

    def preferred(unused: np.ndarray, pool: np.ndarray, mask: np.ndarray) -> int:
        """Highest-priority bucket of ``mask``, an unused one if any (-1 if none)."""
        m = unused & mask
        if m.any():
            return best(m)
        m = pool & mask
        return best(m) if m.any() else -1

    levels_down = list(range(lam, 0, -1))  # least sensitive first
    # per value, a class takes each value at most once (so at most B records); per level, it
    # may take a value again, and gives up at this size
    limit = B if per == "value" else 4 * max(k, math.ceil(1.0 / float(np.nanmin(level_alpha[1:])) - EPS))
    no_start = np.zeros(B, dtype=bool)
    g = 0
    abandoned = 0
    # -- step 2: greedy classes -------------------------------------------------------
    while True:
        if int(np.count_nonzero(size > 0)) < k:
            break
        startable = (size > 0) & ~no_start
        if not startable.any():
            break
        b0 = best(startable)
        l0 = int(level[b0])
        p0 = pick(b0, None)
        first = int(members[b0][p0])
        remove(b0, p0)
        taken = [(b0, first)]
        used = np.zeros(B, dtype=bool)
        used[b0] = True
        ne = 1
        amin = float(alpha_b[b0])
        lc = None
        if per == "level":
            lc = np.zeros(lam + 1)
            lc[l0] = 1
        cycle = [lv for lv in levels_down if lv != l0]
        ptr = 0
        ok = satisfied(ne, amin, lc)
        while not ok and ne < limit:
            nonempty = size > 0
            unused = nonempty & ~used
            pool = unused if lc is None else nonempty
            if not pool.any():
                break
            b = fallback = -1
            for _ in range(len(cycle)):
                lv = cycle[ptr]
                ptr = (ptr + 1) % len(cycle)
                cand = preferred(unused, pool, level_mask[lv])
                if cand < 0:
                    continue
                # per level: pass over a level whose count would break its bound at the new
                # size (the first such level is the fallback when every level would)
                if lc is not None and lc[lv] + 1 > level_alpha[lv] * (ne + 1) + EPS:
                    if fallback < 0:
                        fallback = cand
                    continue
                b = cand
                break
            if b < 0 and lc is not None and lc[l0] + 1 <= level_alpha[l0] * (ne + 1) + EPS:
                b = preferred(unused, pool, level_mask[l0])  # per level: the first record's level has room
            if b < 0:
                b = fallback
            if b < 0:  # only buckets of the first record's level are left
                b = preferred(unused, pool, level_mask[l0])
            p = pick(b, first)
            taken.append((b, int(members[b][p])))
            remove(b, p)
            used[b] = True
            ne += 1
            amin = min(amin, float(alpha_b[b]))
            if lc is not None:
                lc[level[b]] += 1
            ok = satisfied(ne, amin, lc)
        if not ok:  # the class cannot be completed: its records go back to their buckets
            for b, rec in reversed(taken):
                restore(b, rec)
            no_start[b0] = True
            abandoned += 1
            continue
        labels[[rec for _, rec in taken]] = g
        g += 1
        if progress is not None:
            progress(ne)
    greedy = int(np.count_nonzero(labels >= 0))

    # -- step 3: leftovers --------------------------------------------------------------
    placed = 0
    if g and size.any():
        inside = labels >= 0
        lab = labels[inside]
        bk = bucket_of[inside]
        cls_n = np.bincount(lab, minlength=g).astype(np.int64)
        cnt = np.bincount(lab * B + bk, minlength=g * B).reshape(g, B).astype(np.int64)
        lcnt = np.bincount(lab * (lam + 1) + level[bk], minlength=g * (lam + 1)).reshape(g, lam + 1)
        present = lcnt[:, 1:] > 0
        minlev = np.where(present.any(axis=1), np.argmax(present, axis=1) + 1, lam + 1).astype(np.int64)
        rest_buckets = np.flatnonzero(size > 0)
        rest_buckets = rest_buckets[np.lexsort((head[rest_buckets], -size[rest_buckets], level[rest_buckets]))]
        for b in rest_buckets:
            recs = members[b][:size[b]]
            if choice == "random":
                recs = rng.permutation(recs)  # type: ignore[union-attr]
            lv = int(level[b])
            a = float(alpha_b[b])

            def capacity() -> np.ndarray:
                c = cnt[:, b] if per == "value" else lcnt[:, lv]
                if a >= 1.0:
                    return np.full(g, recs.size, dtype=np.int64)
                # (c + x) / (n + x) <= a  <=>  x <= (a n - c) / (1 - a)
                return np.maximum(np.floor((a * cls_n - c) / (1.0 - a) + EPS), 0).astype(np.int64)

            def assign(rs: np.ndarray, to: np.ndarray) -> None:
                labels[rs] = to
                np.add.at(cls_n, to, 1)
                np.add.at(cnt[:, b], to, 1)
                np.add.at(lcnt[:, lv], to, 1)
                minlev[to] = np.minimum(minlev[to], lv)

            cap = capacity()
            far = np.abs(minlev - lv)
            tier1 = np.flatnonzero((lcnt[:, lv] == 0) & (cap >= 1))
            tier1 = tier1[np.lexsort((tier1, -far[tier1]))][:recs.size]
            assign(recs[:tier1.size], tier1)
            rest = recs[tier1.size:]
            if rest.size:
                cap = capacity()
                tier2 = np.flatnonzero(cap >= 1)
                far = np.abs(np.minimum(minlev, lv) - lv)
                tier2 = tier2[np.lexsort((tier2, -far[tier2]))]
                room = np.minimum(cap[tier2], rest.size)
                upto = int(np.searchsorted(np.cumsum(room), rest.size)) + 1
                slots = np.repeat(tier2[:upto], room[:upto])[:rest.size]
                assign(rest[:slots.size], slots)
            placed += int(np.count_nonzero(labels[recs] >= 0))
            size[b] = 0
    stats = {"classes": g, "greedy_records": greedy, "leftovers_placed": placed,
             "suppressed": int(np.count_nonzero(labels < 0)), "abandoned_classes": abandoned}
    return labels, stats


# -- the plugins -------------------------------------------------------------------------


def _values(table: TypedTable, column: str) -> pa.Array:
    col = table.data.column(column)
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return pc.cast(col, pa.string())


def _join_missing(labels: np.ndarray, real: np.ndarray, miss: np.ndarray, enc: Encoded,
                  stats: dict[str, int]) -> np.ndarray:
    """Labels of the whole table from those of its records with a real sensitive value: each
    record with a missing one joins its nearest record's class (suppressed when there is none)."""
    full = np.full(miss.shape[0], -1, dtype=np.int64)
    full[real] = labels
    stats["missing_joined"] = join_nearest(enc, full, np.flatnonzero(miss))
    stats["suppressed"] = int(np.count_nonzero(full < 0))
    return full


class _Gca(Algorithm):
    version = __version__
    #: records that fit in no class are suppressed, up to ``max_suppression`` of the input
    #: (the engine adds the parameter and enforces it)
    suppresses = True
    common = (
        Param("k", "int", min=2, help="minimum class size"),
        Param("choice", "str", default="nearest", choices=CHOICES,
              help="record taken from a bucket: nearest (QI distance to the class's first record), random "
                   "(seeded), first (lowest position, as in seed 002's worked example)"),
        Param("sensitive", "str", default=None, nullable=True,
              help="the sensitive attribute (default: the only one typed)"),
    )

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        k = params["k"]
        if k > table.num_rows:
            raise InputError(f"parameter 'k' = {k} is larger than the table ({table.num_rows} records)")
        s = sensitive_column(table, params["sensitive"], self.name)
        col = table.data.column(s)
        if col.null_count:
            raise InputError(f"sensitive attribute {s!r} has {col.null_count} missing value(s); set missing: drop "
                             "or missing: category in the typing step")
        distinct = len(pc.unique(col)) - (1 if missing_sensitive(table, s).any() else 0)  # missing: no value
        if distinct < k:
            raise InputError(f"{self.name} puts records of k different values of {s!r} in each class, but {s!r} "
                             f"has only {distinct} distinct value(s): parameter 'k' = {k} must be at most {distinct}")
        self._check_bounds(params, table, s, distinct)

    def _check_bounds(self, params: Mapping[str, Any], table: TypedTable, s: str, distinct: int) -> None: ...

    def describe_plan(self, params: Mapping[str, Any], table: TypedTable) -> list[str]:
        cap = self.suppression_cap(params)
        return [f"{self.name}: {table.num_rows:,} records; records that fit in no class are suppressed, at most "
                f"{suppression_limit(cap, table.num_rows):,} (max_suppression = {cap:g}), else the step fails"]

    def _levels(self, params: Mapping[str, Any], table: TypedTable, s: str,
                values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        s = sensitive_column(table, params["sensitive"], self.name)
        # a missing sensitive value is no value (docs/algorithms.md, "Missing values"): classes are
        # built from the records with a real one; the others then join their nearest record's class
        miss = missing_sensitive(table, s)
        real = np.flatnonzero(~miss) if miss.any() else None
        values = _values(table, s)
        encoded = pc.dictionary_encode(values if real is None else values.take(pa.array(real)))
        bucket_of = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        level, level_alpha = self._levels(params, table, s, encoded.dictionary)
        per = params.get("per", "value")
        enc = encode(table) if params["choice"] == "nearest" or real is not None else None
        # progress: records placed in greedy classes; the rest (leftovers, suppressed) at the end
        advance = ctx.progress(table.num_rows, self.name)
        done = [0]

        def placed(n: int) -> None:
            done[0] += n
            advance(n)

        labels, stats = gca_partition(bucket_of, level, level_alpha, params["k"], per=per, choice=params["choice"],
                                      enc=enc if real is None or enc is None else enc.take(real), rng=ctx.rng,
                                      progress=placed)
        if real is not None:
            labels = _join_missing(labels, real, miss, enc, stats)
            ctx.note(f"{stats['missing_joined']} record(s) with a missing {s} value joined the class of their "
                     "nearest record")
        if table.num_rows > done[0]:
            advance(table.num_rows - done[0])
        ctx.note(f"{stats['classes']} classes from {stats['greedy_records']} records; "
                 f"{stats['leftovers_placed']} leftover record(s) joined existing classes"
                 + (f"; {stats['abandoned_classes']} class(es) could not be completed" if stats["abandoned_classes"]
                    else ""))
        data = table.data
        if CLASS in data.column_names:
            data = data.drop_columns([CLASS])
            ctx.note("the input's _class column was replaced")
        data = data.append_column(CLASS, pa.array(labels, type=pa.int64(), mask=labels < 0))
        return table.replace(data=data)


class AlphaKGca(_Gca):
    name = "alpha-k-gca"
    description = ("(alpha,k)-GCA (SPEC section 7): greedy classes of >= k records in which every sensitive value "
                   "is at most alpha of the class; QI values kept exact for lossy-join publication.")
    params = _Gca.common + (
        Param("alpha", "float", above=0.0, max=1.0, help="frequency bound of every sensitive value"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"], "by": "class"},
                "alpha-k-anonymity": {"alpha": params["alpha"], "k": params["k"]}}

    def _check_bounds(self, params: Mapping[str, Any], table: TypedTable, s: str, distinct: int) -> None:
        alpha = params["alpha"]
        need = math.ceil(1.0 / alpha - EPS)
        if need > distinct:
            raise InputError(f"parameter 'alpha' = {alpha:g} needs at least {need} different values of {s!r} in "
                             f"each class, but {s!r} has only {distinct} distinct value(s)")

    def _levels(self, params, table, s, values):
        return np.ones(len(values), dtype=np.int64), np.array([np.nan, params["alpha"]])


class AlphaIKGca(_Gca):
    name = "alpha-i-k-gca"
    description = ("(alpha_i,k)-GCA (SPEC section 7, seed 002): greedy classes of >= k records mixing sensitivity "
                   "levels, each value of level i at most alpha_i of the class; QI values kept exact.")
    params = _Gca.common + (
        Param("per", "str", default="value", choices=("value", "level"),
              help="bound each value's count (value) or the count of all values of a level together (level)"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"], "by": "class"},
                "alpha-i-k-anonymity": {"k": params["k"], "per": params["per"]}}

    def _check_bounds(self, params: Mapping[str, Any], table: TypedTable, s: str, distinct: int) -> None:
        grading = grading_of(table, s, self.name)
        values = pc.unique(_values(table, s))
        if missing_marker(table) is not None:  # a missing value is no value: it takes no level
            values = pc.filter(values, pc.not_equal(values, missing_marker(table)))
        levels = grading.levels_of(values)
        if (levels == 0).any():
            bad = values[int(np.flatnonzero(levels == 0)[0])].as_py()
            raise InputError(f"the grading of {s!r} leaves the value {bad!r} unassigned; add it to a level")

    def _levels(self, params, table, s, values):
        grading = grading_of(table, s, self.name)
        return grading.levels_of(values), grading.alphas()


PLUGINS = [AlphaKGca(), AlphaIKGca()]
