"""How far the released table's distribution lies from the original's: ``hellinger`` (the
Hellinger distance between the two tables' frequencies of categorical columns, one column at a
time and, optionally, jointly) and ``pmse`` (the propensity-score mean squared error of Woo et
al. 2009 with the null expectation of Snoke et al. 2018). docs/perturbation-utility.md.

Neither compares records one to one: they take ``[original, released]`` and compare the two
tables as samples, so they accept any released table (a perturbation's, a microaggregation's,
a generalization's, whose new labels simply count as values the original does not have)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable, numeric_column, sql_ident, value_keys

from .. import __version__

__all__ = ["Hellinger", "Pmse", "hellinger_distance", "frequency_pairs", "design_matrix", "pmse_null"]

ML_HINT = "pmse needs scikit-learn: pip install 'anonflow[ml]'"


def _numeric_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _present(tables: tuple[TypedTable, ...], columns: list[str], metric: str, param: str) -> None:
    for c in columns:
        for which, t in zip(("original", "released"), tables):
            if c not in t.columns:
                raise InputError(f"{metric}: column {c!r} (parameter {param!r}) is not in the {which} table")


# -- Hellinger distance ----------------------------------------------------------------------


def hellinger_distance(f: np.ndarray, g: np.ndarray, total_f: float, total_g: float) -> float:
    """``sqrt(1 - sum_i sqrt(p_i q_i))`` with ``p_i = f_i / total_f`` and ``q_i = g_i / total_g``;
    ``f`` and ``g`` are the counts of the cells both tables hold (a cell only one holds adds 0
    to the sum). The form with 1/sqrt(2): ``(1/sqrt(2)) ||sqrt(p) - sqrt(q)||_2``, in [0, 1]."""
    if total_f <= 0 or total_g <= 0:
        return 0.0 if total_f == total_g else 1.0
    terms = np.sort(np.sqrt(np.asarray(f, dtype=np.float64) * np.asarray(g, dtype=np.float64)))
    affinity = float(terms.sum()) / math.sqrt(float(total_f) * float(total_g))
    return math.sqrt(max(0.0, 1.0 - affinity))


def frequency_pairs(ctx: StepContext, original: TypedTable, released: TypedTable,
                    columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The counts ``(f, g)`` of every cell (combination of values of ``columns``, a null being
    a value) that both tables hold, by DuckDB ``GROUP BY``. A column whose types differ
    between the tables is compared as numbers (both numeric) or as text."""
    keys_o, keys_r, on = [], [], []
    for i, c in enumerate(columns):
        to, tr = original.schema.field(c).type, released.schema.field(c).type
        expr = sql_ident(c)
        if to != tr:
            expr = f"CAST({expr} AS {'DOUBLE' if _numeric_type(to) and _numeric_type(tr) else 'VARCHAR'})"
        elif pa.types.is_dictionary(to):
            expr = f"CAST({expr} AS VARCHAR)"
        keys_o.append(f"{expr} AS k{i}")
        keys_r.append(f"{expr} AS k{i}")
        on.append(f"a.k{i} IS NOT DISTINCT FROM b.k{i}")
    query = (f"WITH a AS (SELECT {', '.join(keys_o)}, count(*) AS n FROM o GROUP BY ALL), "
             f"b AS (SELECT {', '.join(keys_r)}, count(*) AS n FROM r GROUP BY ALL) "
             f"SELECT a.n AS f, b.n AS g FROM a JOIN b ON {' AND '.join(on)}")
    pairs = ctx.sql(query, o=original, r=released)
    return (pairs.column("f").to_numpy().astype(np.float64, copy=False),
            pairs.column("g").to_numpy().astype(np.float64, copy=False))


class Hellinger(Metric):
    name = "hellinger"
    version = __version__
    description = ("Hellinger distance sqrt(1 - sum sqrt(p q)) between the original's and the released frequencies "
                   "of each categorical column (in [0, 1]; headline: the largest), and of their joint table.")
    category = "utility"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="columns whose frequencies are compared one by one (default: the attributes typed nominal or "
                   "ordinal, quasi-identifiers and sensitive ones)"),
        Param("joint", "list", items="str", default=None, nullable=True,
              help="columns whose joint frequency table is compared too (hellinger.joint)"),
    )

    def _columns(self, table: TypedTable, params: Mapping[str, Any]) -> list[str]:
        if params["columns"] is not None:
            return list(params["columns"])
        cols = [a.name for a in table.typing.attributes
                if a.role in ("quasi", "sensitive") and a.type in ("nominal", "ordinal")]
        if not cols and not params["joint"]:
            raise InputError(f"{self.name} needs categorical columns: no attribute is typed nominal or ordinal; "
                             "name them with columns:")
        return cols

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        cols = self._columns(original, params)
        joint = list(params["joint"] or [])
        if not cols and not joint:
            raise InputError(f"{self.name}: no columns to compare; name them with columns: or joint:")
        _present((original, anonymized), cols, self.name, "columns")
        _present((original, anonymized), joint, self.name, "joint")
        n_o, n_r = original.num_rows, anonymized.num_rows
        per = {c: hellinger_distance(*frequency_pairs(ctx, original, anonymized, [c]), n_o, n_r) for c in cols}
        out: dict[str, float] = {}
        if joint:
            out[f"{self.name}.joint"] = hellinger_distance(*frequency_pairs(ctx, original, anonymized, joint),
                                                           n_o, n_r)
        head = max(per.values()) if per else out[f"{self.name}.joint"]
        out = {self.name: head, **({f"{self.name}.mean": sum(per.values()) / len(per)} if per else {}), **out}
        out.update({f"{self.name}.column.{c}": v for c, v in per.items()})
        return out


# -- pMSE ------------------------------------------------------------------------------------


def pmse_null(k: int, c: float, N: int) -> tuple[float, float]:
    """Snoke et al. (2018)'s null expectation and standard deviation of the pMSE of a logistic
    model with ``k`` parameters (intercept included): ``(k - 1)(1 - c)^2 c / N`` and
    ``sqrt(2 (k - 1)) (1 - c)^2 c / N``."""
    scale = (1.0 - c) ** 2 * c / N
    return (k - 1) * scale, math.sqrt(2.0 * (k - 1)) * scale


def _standardized(x: np.ndarray) -> np.ndarray | None:
    """z-scores over both tables (population deviation); None for a constant column."""
    known = x[~np.isnan(x)]
    if known.size == 0:
        return None
    sd = float(known.std())
    if not sd > 0:
        return None
    return (x - float(known.mean())) / sd


#: the most predictors pmse's logistic model may have: Newton's method holds a square matrix of them
MAX_PREDICTORS = 2_000


def design_matrix(original: TypedTable, released: TypedTable, columns: list[str], metric: str = "pmse",
                  model: str = "squares") -> Any:
    """The stacked records (original first, then released) as a matrix of predictors: a numeric
    column standardized over both tables (a missing value set to 0, the mean, with a 0/1 column
    marking the missing ones), any other column one-hot encoded over the sorted values of both
    tables (a null being a value) less its first value, which the intercept stands for. A column
    constant over both tables adds nothing. ``model``: ``linear`` (those), ``squares`` (and the
    square of each standardized numeric column), ``quadratic`` (and the product of every two
    of them). Dense without categorical columns, else sparse (CSR)."""
    from scipy import sparse

    N = original.num_rows + released.num_rows
    numeric: list[np.ndarray] = []
    indicators: list[np.ndarray] = []
    onehot = []
    for c in columns:
        to, tr = original.schema.field(c).type, released.schema.field(c).type
        attr = original.typing.get(c) if c in original.typing else None
        if _numeric_type(to) and _numeric_type(tr) and (attr is None or attr.type not in ("nominal", "ordinal")):
            x = np.concatenate([numeric_column(original, c, metric=metric), numeric_column(released, c, metric=metric)])
            z = _standardized(x)
            if z is None:
                continue
            missing = np.isnan(z)
            if missing.any():
                z[missing] = 0.0
                indicators.append(missing.astype(np.float64))
            numeric.append(z)
            continue
        keys = pa.concat_arrays([value_keys(original.column(c)), value_keys(released.column(c))])
        values = pc.unique(keys.drop_null()).sort()
        codes = pc.fill_null(pc.index_in(keys, value_set=values), len(values))
        codes = np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)
        present = np.flatnonzero(np.bincount(codes, minlength=len(values) + 1))
        if present.size < 2:
            continue
        rank = np.full(len(values) + 1, -1, dtype=np.int64)
        rank[present] = np.arange(present.size) - 1  # the first value present: the baseline, no column
        col = rank[codes]
        rows = np.flatnonzero(col >= 0)
        onehot.append(sparse.csr_matrix((np.ones(rows.size), (rows, col[rows])), shape=(N, present.size - 1)))
    d = len(numeric)
    width = (d + len(indicators) + sum(m.shape[1] for m in onehot) + (d if model in ("squares", "quadratic") else 0)
             + (d * (d - 1) // 2 if model == "quadratic" else 0))
    if width > MAX_PREDICTORS:
        raise InputError(f"{metric}: the model would have {width:,} predictors (at most {MAX_PREDICTORS:,}; the fit "
                         "holds a square matrix of them): name fewer columns, recode columns of many categories, or "
                         "use model: linear")
    extra: list[np.ndarray] = []
    if model in ("squares", "quadratic"):
        extra += [z * z for z in numeric]
    if model == "quadratic":
        extra += [numeric[i] * numeric[j] for i in range(len(numeric)) for j in range(i + 1, len(numeric))]
    dense = numeric + extra + indicators
    D = np.column_stack(dense) if dense else np.zeros((N, 0))
    if not onehot:
        return D
    return sparse.hstack([sparse.csr_matrix(D), *onehot], format="csr")


class Pmse(Metric):
    name = "pmse"
    version = __version__
    description = ("Propensity-score MSE (Woo et al. 2009): a logistic regression tells released from original "
                   "records; mean((p - c)^2), and its ratio to Snoke et al.'s null expectation. Needs scikit-learn: "
                   "pip install 'anonflow[ml]'.")
    category = "utility"
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="predictor columns (default: the quasi-identifiers); continuous ones standardized, others one-hot"),
        Param("model", "str", default="squares", choices=("linear", "squares", "quadratic"),
              help="the logistic model's terms: linear (each predictor), squares (and the square of each numeric "
                   "one: a change of variance shows), quadratic (and the product of every two numeric ones: a "
                   "change of correlation shows)"),
        Param("max_iter", "int", default=100, min=1,
              help="iterations of the logistic regression's solver (Newton's method, newton-cholesky)"),
    )

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        import importlib.util

        if importlib.util.find_spec("sklearn") is None:
            raise InputError(ML_HINT)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        assert original is not None
        try:
            from sklearn.exceptions import ConvergenceWarning
            from sklearn.linear_model import LogisticRegression
        except ImportError:
            raise InputError(ML_HINT) from None
        cols = list(params["columns"]) if params["columns"] is not None else original.typing.quasi
        if not cols:
            raise InputError(f"{self.name} needs predictor columns: name them with columns: (by default the "
                             "quasi-identifiers, and none is typed)")
        _present((original, anonymized), cols, self.name, "columns")
        n0, n1 = original.num_rows, anonymized.num_rows
        if n0 == 0 or n1 == 0:
            raise InputError(f"{self.name} needs records in both tables (original {n0}, released {n1})")
        N = n0 + n1
        c = n1 / N
        X = design_matrix(original, anonymized, cols, self.name, params["model"])
        y = np.concatenate([np.zeros(n0), np.ones(n1)])
        k = 1 + X.shape[1]
        if X.shape[1] == 0:
            p = np.full(N, c)  # the intercept alone predicts c for every record
        else:
            # no penalty (C = inf): Snoke et al.'s null distribution is that of the maximum likelihood fit,
            # which Newton's method (k x k systems, few iterations) finds to tol; it draws nothing at random,
            # the seed is given for form's sake
            model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-8, max_iter=params["max_iter"],
                                       random_state=int(ctx.seed) % (2 ** 32))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                model.fit(X, y)
            if any(issubclass(w.category, ConvergenceWarning) for w in caught):
                ctx.note(f"{self.name}: the logistic regression did not converge in {params['max_iter']} iterations "
                         "(the tables may be perfectly separable); raise max_iter to be sure")
            p = model.predict_proba(X)[:, 1]
        pmse = float(np.mean((p - c) ** 2))
        expected, sd = pmse_null(k, c, N)
        return {self.name: pmse,
                f"{self.name}.ratio": pmse / expected if expected > 0 else 0.0,
                f"{self.name}.standardized": (pmse - expected) / sd if sd > 0 else 0.0,
                f"{self.name}.expected": expected, f"{self.name}.c": c,
                f"{self.name}.parameters": float(k), f"{self.name}.records": float(N)}


PLUGINS = [Hellinger(), Pmse()]
