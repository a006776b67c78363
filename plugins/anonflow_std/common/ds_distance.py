"""The DS distance of L-clustering (SPEC section 5) between generalized tuples and classes
(:func:`ds_records`, :func:`ds_record_class`, :func:`ds_classes`), on the generalized values of
:mod:`anonflow_std.common.generalized`, with reusable scratch buffers (:class:`DSWorkspace`)."""

from __future__ import annotations

import numpy as np

from .generalized import Domain, FloatArray, Generalized

__all__ = ["ds_records", "ds_record_class", "ds_classes", "DSWorkspace"]


class DSWorkspace:
    """Scratch buffers for repeated DS evaluations on up to ``rows`` tuples.

    The greedy steps of L-clustering evaluate DS against all remaining records once per
    added record; with a workspace those calls allocate nothing. Fresh multi-megabyte
    temporaries are page-faulted in on every call and can cost more than the arithmetic
    (up to ~2 ms per ``(45222, 8)`` float64 temporary on the VM this was measured on).
    For the same reason, keep the candidate records fixed and mask used ones in the result
    (e.g. set them to ``inf``) rather than ``take``-ing the remaining records every step.
    A workspace is tied to the domain's shape (``d_ord``, ``d_unord``, ``W``).
    """

    def __init__(self, rows: int, domain: Domain) -> None:
        r, do, du, W = int(rows), domain.d_ord, domain.d_unord, domain.n_words
        self.rows = r
        self.shape = (do, du, W)
        f8 = np.float64
        self.lo_s = np.empty((r, do), f8, order="F")
        self.hi_s = np.empty((r, do), f8, order="F")
        self.num = np.empty((r, do), f8, order="F")   # b* - a* + res
        self.x = np.empty((r, max(do, du)), f8, order="F")
        self.den = np.empty((r, do), f8, order="F")
        self.mask = np.empty((r, max(do, du)), np.bool_, order="F")
        self.mask2 = np.empty((r, do), np.bool_, order="F")
        self.union = np.empty((r, du, W), np.uint64, order="F")
        self.pop = np.empty((r, du, W), np.uint8, order="F")
        self.size_s = np.empty((r, du), np.uint8 if W == 1 else np.int32, order="F")
        self.acc = np.empty((2, r), f8)
        self.tmp = np.empty(r, f8)
        self.out = np.empty(r, f8)

    def fits(self, rows: int, domain: Domain) -> bool:
        return rows <= self.rows and self.shape == (domain.d_ord, domain.d_unord,
                                                    domain.n_words)


def _ord_side(ws: DSWorkspace, r: int, side: Generalized, res: FloatArray,
              w: FloatArray, out: FloatArray) -> None:
    """``out = sum_i w_i L(x_i, x*_i)`` over the ordered attributes of one side (Def. 6):
    ``(b* - a* + res) / (b - a + res)`` where the interval changed, else 0.

    The denominator is folded into the weights when it is constant per column (one tuple
    broadcast against many, or raw records, whose width is 0).
    """
    lo_s, hi_s, num = ws.lo_s[:r], ws.hi_s[:r], ws.num[:r]
    do = lo_s.shape[1]
    changed = np.not_equal(lo_s, side.lo, out=ws.mask[:r, :do])
    changed |= np.not_equal(hi_s, side.hi, out=ws.mask2[:r])
    x = np.multiply(num, changed, out=ws.x[:r, :do])
    if len(side) == 1:
        np.matmul(x, w / (side.hi[0] - side.lo[0] + res), out=out)
    elif side.all_points:
        np.matmul(x, w / res, out=out)
    else:
        den = np.subtract(side.hi, side.lo, out=ws.den[:r])
        den += res
        x /= den
        np.matmul(x, w, out=out)


def _unord_side(ws: DSWorkspace, r: int, side: Generalized, w: FloatArray,
                out: FloatArray) -> None:
    """``out += sum_j w_j L(y_j, y*_j)`` for one side, ``y*`` containing ``y`` (Def. 7):
    ``|y*| / |y|`` where the set grew, else 0. ``1 / |y|`` is folded into the weights
    when constant per column (one tuple broadcast against many, or all singletons)."""
    size_s = ws.size_s[:r]
    du = size_s.shape[1]
    grew = np.not_equal(size_s, side.sizes, out=ws.mask[:r, :du])
    # float64 before the matmul: a mixed-dtype matmul skips BLAS and is 5x slower.
    x = np.multiply(size_s, grew, out=ws.x[:r, :du], dtype=np.float64)
    if len(side) == 1:
        wv = w * side.inv_sizes[0]
    elif side.all_singletons:
        wv = w
    else:
        x *= side.inv_sizes
        wv = w
    out += np.matmul(x, wv, out=ws.tmp[:r])


def _ds(a: Generalized, b: Generalized, domain: Domain, wa: FloatArray | None,
        wb: FloatArray | None, work: DSWorkspace | None,
        out: FloatArray | None) -> FloatArray:
    """``wa * L(a, t*) + wb * L(b, t*)`` with ``t* = phi(a, b)``, broadcasting
    (``None`` weight = 1), every intermediate in ``work``."""
    na, nb = len(a), len(b)
    if na != nb and 1 not in (na, nb):
        raise ValueError(f"cannot broadcast {na} tuples against {nb}")
    r = nb if na == 1 else na  # numpy broadcasting: 1 against 0 gives 0
    if work is None:
        work = DSWorkspace(r, domain)
    elif not work.fits(r, domain):
        raise ValueError("the workspace is too small or built for another domain")
    ws = work
    if out is None:
        out = ws.out[:r]
    elif out.shape != (r,):
        raise ValueError(f"out must have shape ({r},)")
    La, Lb = ws.acc[0, :r], ws.acc[1, :r]
    if domain.d_ord:
        np.minimum(a.lo, b.lo, out=ws.lo_s[:r])
        np.maximum(a.hi, b.hi, out=ws.hi_s[:r])
        num = np.subtract(ws.hi_s[:r], ws.lo_s[:r], out=ws.num[:r])
        num += domain.res
        _ord_side(ws, r, a, domain.res, domain.w_ord, La)
        _ord_side(ws, r, b, domain.res, domain.w_ord, Lb)
    else:
        La.fill(0.0)
        Lb.fill(0.0)
    if domain.d_unord:
        union = np.bitwise_or(a.bits, b.bits, out=ws.union[:r])
        if union.shape[2] == 1:
            np.bitwise_count(union[..., 0], out=ws.size_s[:r])
        else:  # add word by word: contiguous loops (a strided sum over W is slow)
            pop = np.bitwise_count(union, out=ws.pop[:r])
            size_s = ws.size_s[:r]
            np.copyto(size_s, pop[..., 0])
            for k in range(1, union.shape[2]):
                size_s += pop[..., k]
        _unord_side(ws, r, a, domain.w_unord, La)
        _unord_side(ws, r, b, domain.w_unord, Lb)
    if wa is not None:
        La *= wa
    if wb is not None:
        Lb *= wb
    return np.add(La, Lb, out=out)


def ds_records(t1: Generalized, t2: Generalized, domain: Domain, *,
               work: DSWorkspace | None = None,
               out: FloatArray | None = None) -> FloatArray:
    """``DS(t1, t2) = L(t1, t*) + L(t2, t*)``, ``t* = phi(t1, t2)`` (seed 001 Def. 13).

    Broadcasting: equal lengths pair up elementwise; a length-1 side is compared with all.
    With ``work`` (a :class:`DSWorkspace`) nothing is allocated and, unless ``out`` is
    given, the result is a view into the workspace, overwritten by the next call.
    """
    return _ds(t1, t2, domain, None, None, work, out)


def ds_record_class(t: Generalized, g: Generalized, domain: Domain, *,
                    work: DSWorkspace | None = None,
                    out: FloatArray | None = None) -> FloatArray:
    """``DS(t, G) = L(t, t_g*) + |G| * L(t_g, t_g*)``, ``t_g* = phi(t, t_g)`` (Def. 15).

    ``g`` holds class representatives with ``counts = |G|``; ``t`` holds records (its
    counts are ignored). One class against all candidate records: ``g`` of length 1; one
    record against all classes: ``t`` of length 1. ``work``/``out`` as in
    :func:`ds_records`.
    """
    return _ds(t, g, domain, None, g.counts, work, out)


def ds_classes(g: Generalized, h: Generalized, domain: Domain, *,
               work: DSWorkspace | None = None,
               out: FloatArray | None = None) -> FloatArray:
    """``DS(G, H) = |G| * L(t_g, t*) + |H| * L(t_h, t*)``, ``t* = phi(t_g, t_h)`` (Def. 16,
    with the SPEC's correction of the seed's typo). Broadcasting, ``work`` and ``out`` as
    in :func:`ds_records`."""
    return _ds(g, h, domain, g.counts, h.counts, work, out)
