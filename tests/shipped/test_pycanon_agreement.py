"""anonflow's privacy checks against pycanon on the published outputs of the shipped workflows.

Every shipped workflow (``workflows/*.yaml``) whose published output holds a sensitive
attribute next to quasi-identifier classes is run as shipped through the CLI into a temporary
folder; each such output is read back (pandas, every cell as text, so both libraries form the
same classes from the same values) and measured by pycanon
(``pycanon.anonymity.entropy_l_diversity``, ``recursive_c_l_diversity``, ``t_closeness``) and
by anonflow's metric objects (``entropy-l-diversity``, ``recursive-cl-diversity``,
``t-closeness``, classes ``by: values``).

Which outputs apply:

* ``arx-adult-k5``, ``l-incognito-adult``, ``risk-adult`` (three outputs): lattice outputs,
  classes = equal published QI values. Fast.
* ``population-adult`` (two outputs: the 5-anonymous file and the k-map extract): lattice
  outputs, as above. Fast.
* ``gca-adult``: a lossy join (QI table with ``class_id``, SA table of counts per class); the
  SA table is expanded to one record per count and the class id is the only QI. Fast.
* ``adult-mdav``, ``maasae-adult`` (microaggregated QIs, classes = equal centroids) and
  ``l-clustering-adult`` (published generalized values): ``slow`` (the workflow or pycanon's
  per-class loops take 15-45 s each).
* Not applicable: ``census-mdav`` and the ``microaggregation-*`` workflows (no sensitive
  attribute), ``mi-loss-adult`` (no sensitive attribute; the other columns are dropped).

What is compared, and how the two differ:

* **t-closeness** (a text SA: pycanon's equal distance, half the L1 distance, against the
  distribution of the whole published table): the same number, to 1e-9.
* **entropy l**: pycanon returns ``int(exp(min H))``, anonflow the real ``exp(min H)``; so
  pycanon's figure is anonflow's truncated to an integer (when anonflow's is within 1e-9 of an
  integer either neighbour is accepted). pycanon counts the missing marker ``?`` as a value
  and anonflow does not; the outputs here have no ``?`` in the SA (asserted).
* **recursive (c,l)**: pycanon's ``(c, l)`` is not the definition's. Its l is the table's
  distinct l-diversity (the fewest distinct SA values in a class); its c is
  ``max over classes of floor(r_(1) / sum_{i >= l} r_(i) + 1)`` with the counts sorted in
  *increasing* order (r_(1) the smallest), and NaN when l = 1. The definition (ARX, anonflow)
  sorts decreasingly and needs r_1 < c (r_l + ... + r_m). So only l is compared directly:
  anonflow finds no class short of pycanon's l and some class short of l + 1. pycanon's c is
  recomputed from the class counts by its own formula (so the documented difference is
  checked), and anonflow's headline, max r_1 / (r_l + ... + r_m) at pycanon's l, is
  recomputed by the definition; anonflow's check then holds just above it and fails at it
  (strict <).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.helpers import WORKFLOWS
from tests.support.shipped import shipped_run

pycanon = pytest.importorskip("pycanon")
from pycanon import anonymity  # noqa: E402

# (workflow, published file, sensitive attribute, slow); the QIs are the workflow's typed QIs. The
# order is the reverse of test_outputs' (alphabetical) for the two slowest runs, which both files
# read (tests.support.shipped): with the files on two workers, each runs one while the other
# runs the other, and neither waits
CASES = [
    ("maasae-adult", "maasae-adult.parquet", "occupation", True),
    ("adult-mdav", "adult-mdav.parquet", "occupation", True),
    ("gca-adult", "gca-adult-qi.parquet", "occupation", False),
    ("arx-adult-k5", "arx-adult-k5.csv", "salary-class", False),
    ("l-incognito-adult", "l-incognito-adult.csv", "occupation", False),
    ("risk-adult", "risk-adult-k5.csv", "salary-class", False),
    ("risk-adult", "risk-adult-tcloseness.csv", "salary-class", False),
    ("risk-adult", "risk-adult-entropy-l.csv", "salary-class", False),
    ("population-adult", "population-adult.csv", "income", False),
    ("population-adult", "population-adult-extract.csv", "income", False),
    ("l-clustering-adult", "l-clustering-adult.parquet", "occupation", True),
]


def _quasi(workflow: str) -> list[str]:
    spec = yaml.safe_load((WORKFLOWS / f"{workflow}.yaml").read_text())
    quasi = next(s for s in spec["steps"].values() if s.get("uses") == "typing")["with"]["quasi"]
    return list(quasi) if isinstance(quasi, dict) else [next(iter(q)) if isinstance(q, dict) else q for q in quasi]


@pytest.fixture
def outputs(tmp_path_factory):
    """A shipped workflow's output folder, from its one run in this session (tests.support.shipped)."""
    return lambda workflow: shipped_run(workflow, tmp_path_factory)["dir"]


def _frame(folder: Path, workflow: str, name: str, sa: str) -> tuple[pd.DataFrame, list[str]]:
    """The published records as text, with the QI columns pycanon and anonflow group by."""
    path = folder / name
    if name.endswith("-qi.parquet"):  # lossy join: one record per SA count, classes by class id
        sa_table = pq.read_table(path.with_name(name.replace("-qi.", "-sa."))).to_pandas()
        df = sa_table.loc[sa_table.index.repeat(sa_table["count"]), ["class_id", sa]].reset_index(drop=True)
        assert len(df) == pq.read_table(path).num_rows
        quasi = ["class_id"]
    else:
        df = pd.read_csv(path, dtype=str, keep_default_na=False) if path.suffix == ".csv" \
            else pq.read_table(path).to_pandas()
        quasi = [q for q in _quasi(workflow) if q != sa]
    df = df[[*quasi, sa]].astype(str).reset_index(drop=True)
    assert not df.isin(["?", "None", "nan"]).any().any()  # no missing values: both libraries see the same
    return df, quasi


def _anonflow(df: pd.DataFrame, quasi: list[str], sa: str, name: str, params: dict) -> dict:
    from anonflow.params import validate_params
    from anonflow.testing import make_context, typed_table
    from anonflow_std.privacy.entropy_l_diversity import EntropyLDiversity
    from anonflow_std.privacy.recursive_cl_diversity import RecursiveCLDiversity
    from anonflow_std.privacy.t_closeness import TCloseness

    metric = {"entropy-l-diversity": EntropyLDiversity, "recursive-cl-diversity": RecursiveCLDiversity,
              "t-closeness": TCloseness}[name]()
    t = typed_table({c: df[c].tolist() for c in [*quasi, sa]}, quasi={q: "nominal" for q in quasi},
                    sensitive={sa: "nominal"})
    return metric.compute(None, t, validate_params(metric.params, params), make_context())


def _counts(df: pd.DataFrame, quasi: list[str], sa: str) -> list[np.ndarray]:
    return [g.to_numpy() for _, g in df.groupby([*quasi, sa]).size().groupby(level=list(range(len(quasi))) if len(quasi) > 1 else 0)]


def _params():
    return [pytest.param(*case[:3], id=f"{case[0]}:{case[1]}", marks=[pytest.mark.slow] if case[3] else [])
            for case in CASES]


@pytest.mark.parametrize(("workflow", "name", "sa"), _params())
def test_pycanon_agrees_with_anonflow(outputs, workflow, name, sa):
    df, quasi = _frame(outputs(workflow), workflow, name, sa)
    counts = _counts(df, quasi, sa)
    assert len(counts) == df.groupby(quasi).ngroups

    # t-closeness, equal distance: the same number
    t_pc = anonymity.t_closeness(df, quasi, [sa])
    t_af = _anonflow(df, quasi, sa, "t-closeness", {"t": 1.0, "distance": "equal"})
    assert t_af["t-closeness"] == pytest.approx(t_pc, abs=1e-9)
    assert t_af["t-closeness.holds"] == 1

    # entropy l: pycanon truncates anonflow's real l to an integer
    e_pc = anonymity.entropy_l_diversity(df, quasi, [sa])
    e_af = _anonflow(df, quasi, sa, "entropy-l-diversity", {"l": 1.0})["entropy-l-diversity"]
    near = round(e_af)
    assert e_pc == math.floor(e_af) or (abs(e_af - near) < 1e-9 and e_pc in (near - 1, near)), (e_pc, e_af)
    h = min(-(c / c.sum() * np.log(c / c.sum())).sum() for c in counts)
    assert e_af == pytest.approx(math.exp(h), rel=1e-9)

    # recursive (c,l): l compared directly, c each by its own formula
    c_pc, l_pc = anonymity.recursive_c_l_diversity(df, quasi, [sa])
    assert l_pc == min(len(c) for c in counts)
    if l_pc > 1:
        ours = max(math.floor(np.sort(c)[0] / np.sort(c)[l_pc - 1:].sum() + 1) for c in counts)
        assert c_pc == ours  # pycanon's c: increasing order, not the definition's
    else:
        assert math.isnan(c_pc)
    ratio = max(np.sort(c)[::-1][0] / np.sort(c)[::-1][l_pc - 1:].sum() for c in counts)
    at = _anonflow(df, quasi, sa, "recursive-cl-diversity", {"c": ratio, "l": l_pc})
    assert at["recursive-cl-diversity"] == pytest.approx(ratio, rel=1e-9)
    assert at["recursive-cl-diversity.short_classes"] == 0
    assert at["recursive-cl-diversity.holds"] == 0  # r_1 < c (...) is strict
    above = _anonflow(df, quasi, sa, "recursive-cl-diversity", {"c": ratio * (1 + 1e-6), "l": l_pc})
    assert above["recursive-cl-diversity.holds"] == 1
    short = _anonflow(df, quasi, sa, "recursive-cl-diversity", {"c": 1e9, "l": l_pc + 1})
    assert short["recursive-cl-diversity.short_classes"] > 0
    assert short["recursive-cl-diversity.holds"] == 0
