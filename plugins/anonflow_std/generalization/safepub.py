"""SafePub (Bild, Kuhn, Prasser, PETS 2018): the lattice's search when its model is
``ed-differential-privacy``, as ARX runs it (``EDDifferentialPrivacy``,
``DataDependentEDDPAlgorithm``, ``ExponentialMechanism`` and the metrics' ``getScore``).

1. Random sampling: each record is drawn with probability beta, one uniform number per
   record from ``ctx.rng`` in the table's order (ARX: ``nextDouble() < beta`` per record).
   A record not drawn is withheld: it comes back suppressed (null ``_class``), as ARX
   suppresses the records outside its sample, so that the engine keeps it apart from the
   release; the step's suppression cap does not apply to a SafePub run (the mechanism decides
   what is withheld; see ``Lattice.suppression_cap``).
2. For a node, the sampled records' classes of fewer than k records are suppressed.
3. The node: the walk starts at the top node; each step adds the current pivot's direct
   specializations to the candidates (those not among them), removes the pivot, and draws the
   next pivot by the exponential mechanism with epsilon_search / steps, probability
   proportional to exp(epsilon_step * score / 2) (the scores are already divided by their
   sensitivities). The published node is the pivot of best score (ties: the lower node),
   as ARX's ``trackOptimum`` picks it.

Scores (the paper's Section 5 and ARX's ``getScore``; higher is better; n: all the input's
records, kept: the sampled records in classes of at least k, d: the QIs, k > 1 below, k = 1
uses 5 for the discernibility and entropy denominators):

- ``loss``: -(d (n - kept) + sum_i sum_kept-classes share_i(label) |E|) / d / (k - 1), share =
  leaves under the label / leaves of the hierarchy (``MetricMDNMLoss``)
- ``precision``: -(sum_i (kept level_i / height_i + n - kept)) / d / (k - 1) (``MetricMDNMPrecision``)
- ``discernibility``: -(n (n - kept) + sum |E|^2) / (n (k^2 / (k - 1) + 1)) (``MetricSDNMDiscernability``)
- ``entropy``: -(sum_i (n (records whose value i is suppressed or the root) + sum_values count^2))
  / (n d) / (k^2 / (k - 1) + 1) (``MetricMDNUEntropyPrecomputed``)
- ``aecs``: kept classes + 1 if any record is suppressed (sensitivity 1, ``MetricSDAECS``)

Scores are exact fractions (ARX: BigFraction); the mechanism takes their doubles.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, InputError, StepContext, TypedTable, sql_ident

from ..common.dp_params import dp_settings
from .lattice_search import Part, Space, node_output

UTILITIES = ("loss", "precision", "discernibility", "entropy", "aecs")


def check_utility(name: str) -> None:
    if name not in UTILITIES:
        raise InputError(f"lattice: SafePub (ed-differential-privacy) scores nodes by one of {', '.join(UTILITIES)}; "
                         f"not {name!r}")


class Scores:
    """The score of a node's partition of the sampled records (see the module docstring)."""

    def __init__(self, space: Space, n: int, k: int, utility: str) -> None:
        check_utility(utility)
        self.space, self.n, self.k, self.utility = space, n, k, utility
        self.d = space.d
        # ARX's loss shares: leaves under each label of each level over the hierarchy's leaves
        self.leaves = [[lv.leaves(lvl).astype(np.int64) for lvl in range(lv.height + 1)] for lv in space.levels]
        # entropy: a value generalized to the hierarchy's single root counts as suppressed
        self.root: list[list[np.ndarray]] = []
        for lv in space.levels:
            top = lv.labels[lv.height].to_pylist()
            root = top[0] if len(top) == 1 else None
            self.root.append([np.array([v == root for v in lv.labels[lvl].to_pylist()], dtype=bool)
                              if root is not None else np.zeros(lv.cards[lvl], dtype=bool)
                              for lvl in range(lv.height + 1)])

    def __call__(self, part: Part) -> Fraction:
        sizes = part.sizes
        ok = sizes >= self.k
        kept = int(sizes[ok].sum())
        supp = self.n - kept
        n, d, k = self.n, self.d, self.k
        sens = Fraction(k * k, k - 1) + 1 if k > 1 else Fraction(5)
        if self.utility == "aecs":
            return Fraction(int(np.count_nonzero(ok & (sizes > 0))) + (1 if supp > 0 else 0))
        if self.utility == "discernibility":
            sq = int((sizes[ok] * sizes[ok]).sum())
            return -Fraction(n * supp + sq) / (n * sens)
        if self.utility == "precision":
            total = sum(Fraction(kept * lvl, int(h)) if h else Fraction(0) for lvl, h in
                        zip(part.levels, self.space.heights)) + d * supp
            score = -total / d
            return score / (k - 1) if k > 1 else score
        if self.utility == "loss":
            total = Fraction(d * supp)
            for i, lvl in enumerate(part.levels):
                share = self.leaves[i][lvl]
                total += Fraction(int((share[part.reps[i][ok]] * sizes[ok]).sum()), self.space.levels[i].n_leaves)
            score = -total / d
            return score / (k - 1) if k > 1 else score
        # entropy
        total = 0
        for i, lvl in enumerate(part.levels):
            codes, counts = part.reps[i][ok], sizes[ok]
            at_root = self.root[i][lvl][codes]
            total += n * (supp + int(counts[at_root].sum()))
            per_value = np.bincount(codes[~at_root], weights=counts[~at_root]).astype(np.int64)
            total += int((per_value * per_value).sum())
        return -Fraction(total) / (n * d) / sens


def exponential_choice(scores: list[float], epsilon: float, rng: np.random.Generator) -> int:
    """ARX's ``ExponentialMechanism``: index i with probability proportional to exp(epsilon
    score_i / 2) (shifted by the largest exponent), drawn by one uniform number against the
    cumulative probabilities (commons-math's ``EnumeratedDistribution``)."""
    exps = 0.5 * epsilon * np.asarray(scores, dtype=np.float64)
    p = np.exp(exps - exps.max())
    p = p / p.sum()
    cum = np.cumsum(p)
    return min(int(np.searchsorted(cum, rng.random(), side="left")), len(scores) - 1)


def exponential_probabilities(scores: list[float], epsilon: float) -> np.ndarray:
    """The exact selection probabilities of :func:`exponential_choice` (for tests)."""
    e = 0.5 * epsilon * np.asarray(scores, dtype=np.float64)
    w = np.exp(e - e.max())
    return w / w.sum()


def walk(top: tuple[int, ...], score: Callable[[tuple[int, ...]], Fraction], steps: int, epsilon_step: float,
         rng: np.random.Generator) -> tuple[tuple[int, ...], Fraction, int]:
    """SafePub's search (ARX's ``DataDependentEDDPAlgorithm.traverse``): from ``top``, each
    step adds the pivot's direct specializations (not already candidates) to the candidates,
    removes the pivot and draws the next one by the exponential mechanism. Returns the pivot
    of best score (ties: the lower node, then the earlier), its score and the pivots drawn."""
    pivot = top
    best, best_score = pivot, score(pivot)
    cand: dict[tuple[int, ...], Fraction] = {pivot: best_score}
    drawn = 0
    for _ in range(steps):
        for i, lvl in enumerate(pivot):
            if lvl > 0:
                pred = pivot[:i] + (lvl - 1,) + pivot[i + 1:]
                if pred not in cand:
                    cand[pred] = score(pred)
        cand.pop(pivot, None)
        if not cand:
            break
        nodes = list(cand)
        pivot = nodes[exponential_choice([float(cand[v]) for v in nodes], epsilon_step, rng)]
        drawn += 1
        s = cand[pivot]
        if s > best_score or (s == best_score and sum(pivot) < sum(best)):
            best, best_score = pivot, s
    return best, best_score, drawn


def run_safepub(table: TypedTable, params: Mapping[str, Any], mparams: Mapping[str, Any], ctx: StepContext,
                published_typing: Callable[..., Any]) -> TypedTable:
    """The lattice's run for ``ed-differential-privacy`` (module docstring)."""
    t0 = time.perf_counter()
    quasi = list(table.typing.quasi)
    s = dp_settings(mparams, len(quasi))
    utility = params["utility"]
    check_utility(utility)
    n = table.num_rows
    sampled = ctx.rng.random(n) < s["beta"]
    space = Space(table, quasi, sampled.astype(np.int64))
    scores = Scores(space, n, s["k"], utility)

    def score(levels: tuple[int, ...]) -> Fraction:
        return scores(space.partition(levels))

    fixed = s["generalization"]
    if fixed:
        unknown = sorted(set(fixed) - set(quasi))
        if unknown or set(fixed) != set(quasi):
            raise InputError(f"ed-differential-privacy: generalization must give a level for each quasi-identifier "
                             f"({', '.join(quasi)}); got {', '.join(map(str, fixed)) or 'none'}")
        levels = tuple(int(fixed[q]) for q in quasi)
        bad = [q for q, lvl, h in zip(quasi, levels, space.heights) if not 0 <= lvl <= h]
        if bad:
            raise InputError(f"ed-differential-privacy: generalization level of {bad[0]!r} outside 0..its height")
        value, drawn = score(levels), 0
    else:
        levels, value, drawn = walk(tuple(int(h) for h in space.heights), score, s["steps"],
                                    s["epsilon_per_step"], ctx.rng)
    t_search = time.perf_counter() - t0

    part = space.partition(levels)
    ok = part.sizes >= s["k"]
    classes = space.classes(part)
    kept = ok[classes] & sampled
    gen, select = node_output(space, quasi, levels, ok, classes, kept, table.columns)
    out = ctx.derive(f"SELECT {select}, g.{sql_ident(CLASS)} FROM base t POSITIONAL JOIN gen g",
                     base=table, gen=pa.table(gen))

    n_sampled = int(sampled.sum())
    n_kept = int(kept.sum())
    n_classes = int(np.count_nonzero(ok & (part.sizes > 0)))
    how = ("the fixed generalization (no search: all of epsilon to the anonymization)" if fixed else
           f"{drawn} step(s) of the exponential mechanism (epsilon {s['epsilon_search']:g} over {s['steps']} steps, "
           f"{s['epsilon_per_step']:.6g} each; {space.evaluations} node(s) scored)")
    ctx.note(f"lattice: SafePub ({s['epsilon']:g}, {s['delta']:g})-differential privacy covering the whole input "
             f"table of {n} records: sampled {n_sampled} with beta = {s['beta']!r}, derived k = {s['k']}; node "
             f"{space.describe(levels)} by {how}, {utility} score {float(value):.6g}; {n_kept} record(s) published "
             f"in {n_classes} class(es), {n - n_kept} withheld ({n - n_sampled} not sampled, "
             f"{n_sampled - n_kept} in classes below k); search {t_search:.2f} s")
    ctx.record_fitted("node", {"quasi": quasi, "levels": [int(lv) for lv in levels]})
    ctx.record_fitted("differential_privacy", {
        "model": "ed-differential-privacy", "mechanism": "SafePub", "epsilon": s["epsilon"], "delta": s["delta"],
        "beta": s["beta"], "k": s["k"], "epsilon_anonymization": s["epsilon_anonymization"],
        "epsilon_search": s["epsilon_search"], "steps": s["steps"], "utility": utility,
        "records": n, "sampled": n_sampled, "published": n_kept, "suppressed": n - n_kept,
        "classes": n_classes, "covers": "the whole input table"})
    return TypedTable(None, published_typing(table.typing, quasi), {}, table.hierarchies, stored=out.stored)
