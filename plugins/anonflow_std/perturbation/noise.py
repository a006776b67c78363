"""Noise addition on continuous columns, as sdcMicro's ``addNoise`` names its methods.

- ``additive``: each column plus independent normal noise of standard deviation
  ``noise/100 * sd(column)`` (sdcMicro ``addNoise_additive``; ``noise`` is a percentage of the
  column's sample standard deviation, default 150).
- ``correlated``: the columns plus multivariate normal noise of covariance ``noise/100 * S``,
  ``S`` the columns' sample covariance matrix (sdcMicro ``addNoise_correlated``; here ``noise``
  is a percentage of the *covariance*, so the expected covariance of the result is
  ``(1 + noise/100) * S`` and the correlations are kept in expectation).
- ``exact-moments``: the correlated noise, then an affine map that restores the columns' sample mean
  vector and covariance matrix exactly (see :func:`restore_moments`). sdcMicro's ``restr``
  applies Kim's linear transformation ``c*x + (1 - c)*mean(x)`` without drawing any noise;
  docs/perturbation-continuous.md says why this differs.
- ``additive0``, ``correlated2`` (parameter ``delta``), ``restr`` (Kim's restricted noise, with
  the noise drawn, unlike sdcMicro's code), ``ROMM`` (parameters ``p`` and ``block_size``: random
  orthogonal matrix masking, block-diagonal) and ``outdect`` (noise on outliers only): see
  :mod:`.noise_methods`.

Every record is its own class; the noised columns are published as float64 (integers too: a
rounding would change the noise's distribution and break ``exact-moments``'s exact moments). The
helpers :func:`perturbed_columns` and :func:`publish_columns` serve the family's other numeric
methods (``rank-swap``, ``shuffle``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from anonflow.api import (CLASS, ROW, Algorithm, InputError, Param, StepContext, TypedTable, generalization,
                          numeric_column)

from .. import __version__
from ..common.columns import replace_columns
from . import noise_methods as nm

METHODS = ("additive", "correlated", "exact-moments", "additive0", "correlated2", "restr", "ROMM", "outdect")

#: ROMM's default block: at 10 million records a batched QR of 32 x 32 blocks stays well within a
#: minute on 2 cores (tests/benchmarks/bench_noise_swap.py); larger blocks cost block_size^2 a record
ROMM_BLOCK = 32


# -- helpers shared by the family's numeric methods -------------------------------------------


def default_columns(table: TypedTable | None, plugin: str, param: str = "columns") -> list[str]:
    """What a numeric perturbation changes when ``columns`` is not given: the continuous
    quasi-identifiers, in the typing's order (none: one line asking for ``columns``)."""
    if table is None:
        return []
    cols = [q for q in table.typing.quasi if table.typing.get(q).type == "continuous"]
    if not cols:
        raise InputError(f"{plugin}: the table has no continuous quasi-identifier; name the numeric columns to "
                         f"change with '{param}: [...]'")
    return cols


def perturbed_columns(table: TypedTable, names: Sequence[str] | None, plugin: str,
                      param: str = "columns") -> list[str]:
    """The columns ``names`` (parameter ``param``) a numeric perturbation reads or changes: each
    must be a column of numbers, not generalized labels; a bad one fails in one line naming it.

    ``names`` None: the table's continuous quasi-identifiers (:func:`default_columns`)."""
    cols = default_columns(table, plugin, param) if names is None else list(names)
    if not cols:
        raise InputError(f"{plugin}: parameter '{param}' is empty; name at least one numeric column")
    if len(set(cols)) != len(cols):
        dup = next(c for c in cols if cols.count(c) > 1)
        raise InputError(f"{plugin}: parameter '{param}' names {dup!r} twice")
    schema = table.schema
    for name in cols:
        if name not in table.columns or name in (ROW, CLASS):
            raise InputError(f"{plugin}: parameter '{param}' names {name!r}, which is not a column of the table")
        if generalization(table, name):
            raise InputError(f"{plugin}: column {name!r} holds generalized labels from an earlier step; "
                             f"perturb the numbers before generalizing them")
        typ = schema.field(name).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
            raise InputError(f"{plugin}: column {name!r} ({param}) is {typ}, not numbers; name only numeric columns")
    return cols


def column_values(table: TypedTable, name: str, plugin: str) -> np.ndarray:
    """One numeric column as float64, refusing missing and non-finite values."""
    col = table.column(name)
    if col.null_count:
        raise InputError(f"{plugin}: column {name!r} has {col.null_count} missing value(s); drop or impute them "
                         "first (the typing step's 'missing' policy)")
    x = numeric_column(table, name, metric=plugin)  # chunks, dictionaries and decimals read as numbers
    if not np.isfinite(x).all():
        raise InputError(f"{plugin}: column {name!r} holds infinite or NaN values")
    return x


def publish_columns(table: TypedTable, new: Mapping[str, pa.Array], ctx: StepContext | None) -> TypedTable:
    """``table`` with the columns ``new`` replaced (same record order) and ``_class`` =
    0 .. n-1 (each record its own class; the engine renumbers classes by published values).
    A table in the store stays there: the new columns are joined to it by position."""
    return replace_columns(table, new, pa.array(np.arange(table.num_rows, dtype=np.int64)), ctx)


# -- the formulas ------------------------------------------------------------------------------


def sym_sqrt(S: np.ndarray, inverse: bool = False, rtol: float = 1e-10) -> np.ndarray:
    """The symmetric square root of a positive semi-definite matrix (or, with ``inverse``, of
    its pseudo-inverse): eigenvalues below ``rtol`` times the largest count as 0."""
    w, V = np.linalg.eigh((S + S.T) / 2)
    keep = w > rtol * max(float(w.max()), 0.0) if w.size else w > 0
    root = np.zeros_like(w)
    root[keep] = 1 / np.sqrt(w[keep]) if inverse else np.sqrt(w[keep])
    return (V * root) @ V.T


def scales(X: np.ndarray) -> np.ndarray:
    """Each column's sample standard deviation (divisor n - 1), 1 for a constant column: the
    matrix work below is done on ``X / scales(X)``, so that columns of very different sizes
    (incomes and shares) weigh alike when small eigenvalues are told from rounding noise."""
    sd = X.std(axis=0, ddof=1) if X.shape[0] > 1 else np.zeros(X.shape[1])
    return np.where(sd > 0, sd, 1.0)


def restore_moments(Z: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``Z`` mapped affinely to the sample mean vector and covariance matrix of ``X``:
    ``mean(X) + (Z - mean(Z)) @ Sz^(-1/2) @ Sx^(1/2)`` (symmetric roots), whose covariance is
    ``Sx^(1/2) Sz^(-1/2) Sz Sz^(-1/2) Sx^(1/2) = Sx`` when ``Sz`` spans what ``Sx`` spans (the
    noise of ``exact-moments`` lies in the span of ``Sx``; directions with no variance, such as an exact
    linear relation between columns, stay without it). Computed on columns divided by
    :func:`scales` of ``X``, and scaled back."""
    d = scales(X)
    Xs, Zs = X / d, Z / d
    Sx = np.atleast_2d(np.cov(Xs, rowvar=False))
    Sz = np.atleast_2d(np.cov(Zs, rowvar=False))
    A = sym_sqrt(Sz, inverse=True) @ sym_sqrt(Sx)
    return (Xs.mean(axis=0) + (Zs - Zs.mean(axis=0)) @ A) * d


def add_noise(X: np.ndarray, method: str, noise: float, rng: np.random.Generator, *, delta: float = 0.1,
              p: float = 0.001, block_size: int = ROMM_BLOCK) -> np.ndarray:
    """sdcMicro's ``addNoise`` on the ``(n, d)`` array ``X`` (see the module docstring); the
    draws come from ``rng`` in a fixed order (column by column for ``additive``; for
    ``correlated``, ``exact-moments`` and ``restr`` one multivariate normal draw of ``n`` rows with
    covariance ``c R``, ``R`` the correlation matrix, each column then multiplied by its standard
    deviation: covariance ``c S``; the others as :mod:`.noise_methods` says). ``delta`` is
    ``correlated2``'s, ``p`` and ``block_size`` ``ROMM``'s; ``noise`` is unused by those two."""
    n, d = X.shape
    c = noise / 100.0
    if method == "correlated2":
        return nm.correlated2(X, delta, rng)
    if method == "ROMM":
        return nm.romm(X, p, block_size, rng)
    if method == "additive0":
        return nm.additive0(X, noise, rng)
    if method == "outdect":
        return nm.outdect(X, noise, rng)
    if method == "additive":
        out = np.empty_like(X)
        for j in range(d):
            sd = float(X[:, j].std(ddof=1)) if n > 1 else 0.0
            out[:, j] = X[:, j] + rng.normal(0.0, c * sd, size=n)
        return out
    sd = scales(X)
    R = np.atleast_2d(np.cov(X / sd, rowvar=False)) if n > 1 else np.zeros((d, d))
    E = rng.multivariate_normal(np.zeros(d), c * R, size=n, method="eigh", check_valid="ignore")
    Z = X + E * sd
    if method == "correlated":
        return Z
    if method == "restr":
        return nm.restr(X, E * sd, noise)
    if method == "exact-moments":
        return restore_moments(Z, X)
    raise InputError(f"noise: unknown method {method!r}; one of {', '.join(METHODS)}")


class Noise(Algorithm):
    name = "noise"
    version = __version__
    description = ("Noise addition on continuous columns (sdcMicro addNoise): additive (sd = noise % of each "
                   "column's sd), correlated (covariance = noise % of the columns'), exact-moments (correlated, then "
                   "means and covariance restored exactly), additive0, correlated2, restr, ROMM, outdect.")
    params = (
        Param("columns", "list", items="str", default=None, nullable=True,
              help="the numeric columns to noise (default: the continuous quasi-identifiers)"),
        Param("method", "str", default="additive", choices=METHODS,
              help="additive: independent per column; correlated: covariance proportional to the columns'; "
                   "exact-moments: correlated, then means and covariance restored exactly; additive0: additive, "
                   "zeros kept; correlated2: Kim's per column (delta); restr: Kim's restricted (correlated noise, "
                   "then shrunk to the mean); ROMM: random orthogonal matrix masking by blocks (p, block_size); "
                   "outdect: noise on outliers only"),
        Param("noise", "float", default=150.0, min=0,
              help="amount of noise in percent (sdcMicro's default 150): of each column's sd for additive, "
                   "additive0 and outdect's scale, of the covariance matrix for correlated, exact-moments and restr; "
                   "unused by correlated2 and ROMM"),
        Param("delta", "float", default=0.1, above=0, max=1,
              help="correlated2: the weight of the noise, 0 < delta < 1 (x' = sqrt(1 - delta^2) x + delta y)"),
        Param("p", "float", default=0.001, min=0,
              help="ROMM: the size of the random matrix M in I + p M before its orthonormalization"),
        Param("block_size", "int", default=ROMM_BLOCK, min=2,
              help="ROMM: records mixed together (consecutive in table order); masking grows with "
                   "sqrt(block_size), time with block_size^2 a record"),
    )
    per_fragment = False

    def check(self, params: Mapping[str, Any], table: TypedTable, **_: Any) -> None:
        perturbed_columns(table, params["columns"], self.name)
        if table.num_rows < 2:
            raise InputError(f"noise needs at least 2 records to estimate standard deviations; the table has "
                             f"{table.num_rows}")
        if params["method"] == "correlated2" and not 0 < float(params["delta"]) < 1:
            raise InputError(f"noise: parameter 'delta' must lie strictly between 0 and 1 for correlated2, not "
                             f"{params['delta']}")
        n, w = table.num_rows, float(params["noise"]) / 100
        if params["method"] == "restr" and n < 500 and w >= n - 1:
            raise InputError(f"noise: method restr needs noise/100 below n - 1 on fewer than 500 records (its factor "
                             f"sqrt((n - 1 - w) / ((n + 1)(1 + w))) is not positive otherwise); here n = {n}, "
                             f"noise = {params['noise']}")
        if params["method"] == "outdect":
            import importlib.util

            if importlib.util.find_spec("sklearn") is None:
                raise InputError("noise: method outdect needs scikit-learn (robust MCD covariance): "
                                 "pip install 'anonflow[ml]'")

    def perturbs(self, params: Mapping[str, Any], table: TypedTable | None = None) -> dict[str, dict[str, Any]]:
        method, noise = params["method"], float(params["noise"])
        what: dict[str, Any] = {"kind": "noise", "method": method, "noise": noise, "rounded": False}
        if method in ("additive", "additive0"):
            what.update(distribution="normal", relative_sd=noise / 100)
            if method == "additive0":
                what.update(zeros_kept=True)
        elif method == "correlated2":
            delta = float(params["delta"])
            what = {"kind": "noise", "method": method, "rounded": False, "delta": delta, "distribution": "normal",
                    "relative_sd": delta, "shrink": float(np.sqrt(1 - delta ** 2)),
                    "kept_in_expectation": ["mean", "variance"]}
        elif method == "ROMM":
            p, b = float(params["p"]), int(params["block_size"])
            what = {"kind": "noise", "method": method, "rounded": False, "p": p, "block_size": b,
                    "transform": "rotation", "blocks": "consecutive records in table order, the remainder joined "
                                                       "to the last block",
                    "approx_relative_perturbation": p * float(np.sqrt(b - 1)), "relative_to": "rms within block",
                    "restored": ["cross-products within each block"]}
        elif method == "outdect":
            what.update(distribution="normal", records="outliers only",
                        outliers="value above its column's 99% quantile or robust Mahalanobis distance (MCD, "
                                 "support fraction 0.5) above sqrt(qchisq(0.975, columns))",
                        mcd_sample=nm.MCD_SAMPLE, sd="1.96 * sd(column) / sqrt(n) * noise / 100")
        else:
            what.update(distribution="multivariate normal", relative_covariance=noise / 100)
        if method == "exact-moments":
            what.update(restored=["mean", "covariance"])
        if method == "restr":
            what.update(shrunk_to_mean="c = sqrt((n-1-w)/((n+1)(1+w))) for n < 500, else sqrt((n-1)/(n+n w-1)), "
                                       "w = noise/100", expected_covariance="c^2 (1 + w) S")
        cols = list(params["columns"]) if params["columns"] is not None else default_columns(table, self.name)
        joint = method in ("correlated", "exact-moments", "restr", "ROMM", "outdect")
        return {c: dict(what, columns=list(cols)) if joint else dict(what) for c in cols}

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        self.check(params, table)
        cols = perturbed_columns(table, params["columns"], self.name)
        X = np.column_stack([column_values(table, c, self.name) for c in cols])
        Y = add_noise(X, params["method"], float(params["noise"]), ctx.rng, delta=float(params["delta"]),
                      p=float(params["p"]), block_size=int(params["block_size"]))
        return publish_columns(table, {c: pa.array(Y[:, j], type=pa.float64()) for j, c in enumerate(cols)}, ctx)


PLUGINS = [Noise()]
