"""The ``noise`` plugin's methods beyond plain additive and correlated noise, after sdcMicro's
``addNoise`` (``R/addNoise.r``): ``additive0``, ``correlated2``, ``restr``, ``ROMM`` and
``outdect``. Each function takes the ``(n, d)`` float array of the columns and ``ctx.rng`` and
returns the perturbed array; the draws come from the generator in the order each docstring
states. docs/perturbation-continuous.md gives the formulas and how each differs from sdcMicro.
"""

from __future__ import annotations

import numpy as np

from anonflow.api import InputError

#: the most matrix entries (8 bytes each) one chunk of ROMM blocks holds: about 32 MiB a chunk
ROMM_CHUNK = 4_000_000

#: outdect fits the MCD on a seeded sample of this many records when the table is larger
MCD_SAMPLE = 20_000


def additive0(X: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """sdcMicro ``addNoise_additive0``: ``additive`` (column by column, ``n`` normals of sd
    ``noise/100 * sd(column)``), with the noise of every zero value set to 0, so zeros stay
    zero. The draws are those of ``additive``: the other values get the same noise."""
    n, d = X.shape
    out = np.empty_like(X)
    for j in range(d):
        sd = float(X[:, j].std(ddof=1))
        e = rng.normal(0.0, noise / 100 * sd, size=n)
        e[X[:, j] == 0] = 0.0
        out[:, j] = X[:, j] + e
    return out


def correlated2(X: np.ndarray, delta: float, rng: np.random.Generator) -> np.ndarray:
    """sdcMicro ``addNoise_correlated2`` (Kim's method, per column): with ``d1 = sqrt(1 - delta^2)``,
    ``x' = d1 x + delta y``, ``y ~ N((1 - d1)/delta * mean(x), sd(x)^2)``, i.e.
    ``d1 x + (1 - d1) mean(x) + delta sd(x) z``: the mean and the variance of each column are kept
    in expectation (``d1^2 + delta^2 = 1``), covariances between columns shrink by ``d1^2``.
    ``n`` standard normals per column, column after column."""
    n, d = X.shape
    d1 = float(np.sqrt(1 - delta ** 2))
    out = np.empty_like(X)
    for j in range(d):
        x = X[:, j]
        m, sd = float(x.mean()), float(x.std(ddof=1))
        out[:, j] = x * d1 + delta * rng.normal((1 - d1) / delta * m, sd, size=n)
    return out


def restr_factor(n: int, noise: float) -> float:
    """sdcMicro's ``c`` of ``addNoise_restr`` (``w = noise/100``): ``sqrt((n - 1 - w) / ((n + 1)(1 + w)))``
    for ``n < 500``, else ``sqrt((n - 1) / (n + n w - 1))``."""
    w = noise / 100
    if n < 500:
        return float(np.sqrt((n - 1 - w) / ((n + 1) * (1 + w))))
    return float(np.sqrt((n - 1) / (n + n * w - 1)))


def restr(X: np.ndarray, E: np.ndarray, noise: float) -> np.ndarray:
    """Kim's restricted noise: ``c (x + e) + (1 - c) mean(x)`` with ``c`` = :func:`restr_factor`
    and ``E`` the correlated noise (covariance ``noise/100 * S``, drawn by the caller as for
    ``correlated``). Expected covariance ``c^2 (1 + w) S``; expected mean ``mean(x)``.
    sdcMicro's code computes the same ``c`` but applies it to ``x`` without any noise."""
    c = restr_factor(X.shape[0], noise)
    return c * (X + E) + (1 - c) * X.mean(axis=0)


# -- ROMM ---------------------------------------------------------------------------------------


def gram_schmidt(P: np.ndarray) -> np.ndarray:
    """The Gram-Schmidt orthonormalization of the columns of each square matrix of the stack
    ``P`` (``(..., b, b)``), in column order: the ``Q`` of ``P = QR`` with the diagonal of ``R``
    positive (the QR factorization with that sign is unique for an invertible ``P``, and
    Gram-Schmidt computes exactly it). Householder QR (LAPACK, batched), then each column of
    ``Q`` multiplied by the sign of ``R``'s diagonal entry."""
    Q, R = np.linalg.qr(P)
    diag = np.diagonal(R, axis1=-2, axis2=-1)
    if (diag == 0).any():
        raise InputError("noise: ROMM drew a singular matrix I + p M (its columns are collinear); use another "
                         "seed or a smaller 'p'")
    return Q * np.sign(diag)[..., None, :]


def romm_blocks(n: int, block_size: int) -> list[tuple[int, int]]:
    """The ``(start, size)`` of ROMM's blocks: consecutive records in table order,
    ``block_size`` each; the remainder ``n mod block_size`` joins the last block (which then
    holds ``block_size .. 2 block_size - 1`` records), so no record sits in a block smaller
    than ``block_size``. ``block_size >= n``: one block, sdcMicro's ROMM."""
    if block_size >= n:
        return [(0, n)]
    full = n // block_size
    out = [(i * block_size, block_size) for i in range(full - 1)]
    out.append(((full - 1) * block_size, n - (full - 1) * block_size))
    return out


def romm(X: np.ndarray, p: float, block_size: int, rng: np.random.Generator) -> np.ndarray:
    """ROMM (Ting, Fienberg & Trottini) block by block: each block ``Xb`` of :func:`romm_blocks`
    becomes ``T Xb``, ``T`` the Gram-Schmidt orthonormalization of ``I + p M``, ``M`` the
    block's ``b x b`` standard normals, drawn block after block, each row by row
    (``rng.standard_normal((b, b))``). ``T`` orthogonal: ``Xb' Xb`` is kept exactly, and so is
    the whole table's ``X' X``. Full blocks go through a batched QR, chunk by chunk."""
    n, d = X.shape
    out = np.empty_like(X)
    blocks = romm_blocks(n, block_size)
    regular = len(blocks) - 1  # every block but the last has block_size records
    b = block_size
    per_chunk = max(1, ROMM_CHUNK // (b * b))
    for s in range(0, regular, per_chunk):
        k = min(per_chunk, regular - s)
        P = rng.standard_normal((k, b, b))
        P *= p
        P += np.eye(b)
        rows = slice(s * b, (s + k) * b)
        out[rows] = np.matmul(gram_schmidt(P), X[rows].reshape(k, b, d)).reshape(k * b, d)
    start, size = blocks[-1]
    P = np.eye(size) + p * rng.standard_normal((size, size))
    out[start:] = gram_schmidt(P) @ X[start:]
    return out


# -- outdect ------------------------------------------------------------------------------------


def outliers(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """sdcMicro's outliers of ``addNoise_outdect``, as a boolean per record: a value above its
    column's 99 % quantile (R's default type 7, numpy's ``linear``), or a robust Mahalanobis
    distance above ``sqrt(qchisq(0.975, d))``, the distance from scikit-learn's MCD
    (``MinCovDet(support_fraction=0.5)``, its reweighted location and covariance; robustbase's
    ``covMcd(alpha = 1/2)`` in sdcMicro). The MCD is fitted on all records up to
    :data:`MCD_SAMPLE` of them, else on a seeded sample of that many; one integer drawn from
    ``rng`` seeds it (and the sample, drawn next)."""
    from scipy.stats import chi2

    try:
        from sklearn.covariance import MinCovDet
    except ImportError:
        raise InputError("noise: method outdect needs scikit-learn (robust MCD covariance): "
                         "pip install 'anonflow[ml]'") from None
    n, d = X.shape
    flagged = (X > np.quantile(X, 0.99, axis=0)).any(axis=1)
    seed = int(rng.integers(2 ** 31 - 1))
    fit = X if n <= MCD_SAMPLE else X[np.sort(np.random.default_rng(seed).choice(n, MCD_SAMPLE, replace=False))]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not full rank": the distances below use a pseudo-inverse
        try:
            mcd = MinCovDet(support_fraction=0.5, random_state=seed).fit(fit)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise InputError(f"noise: method outdect could not fit the robust covariance (MCD): "
                             f"{str(exc).splitlines()[0]}") from None
    limit = float(np.sqrt(chi2.ppf(0.975, d)))
    rd = np.sqrt(np.maximum(mcd.mahalanobis(X), 0.0))
    return flagged | (rd > limit)


def outdect(X: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """sdcMicro ``addNoise_outdect``: the :func:`outliers` get normal noise of sd
    ``1.96 sd(x_j) / sqrt(n) * noise/100`` in every column ``j``; the other records are left
    as they are. Draws: the MCD's seed, then per column one normal per outlier."""
    n, d = X.shape
    out = X.copy()
    rows = np.flatnonzero(outliers(X, rng))
    for j in range(d):
        sd = 1.96 * float(X[:, j].std(ddof=1)) / np.sqrt(n) * noise / 100
        out[rows, j] += rng.normal(0.0, sd, size=rows.size)
    return out
