"""Partitioned runs: the ``partition`` step, algorithms run once per fragment group on every
executor, and what must not change because of it.

- the partition step against fragments computed by hand (continuous and nominal columns,
  strata, ties, identical records halved by position) and against a plain reference
  implementation of its rule (strata, then Mondrian median cuts) on synthetic data and on
  ARX's Adult with its hierarchies; the fragments table; bad parameters are one line;
- ``_fragment`` is the engine's: it is never published;
- every per-fragment algorithm fed by a partition: each record once, class ids global, and
  the model it claims checked here, independently (pandas, and pycanon where it applies);
- the lattice on a partition publishes the same bytes as without one;
- fragments too poor for the claimed model are merged with a neighbour (notes and plan);
- the same bytes on local, processes:2, Dask LocalClusters of 1 and 2 workers and an
  external scheduler, also when a worker process is killed mid-run;
- executor settings that are refused, and the work folder that never stays behind.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from anonflow.errors import WorkflowError
from anonflow.workflow.spec import load_workflow

from tests.support.helpers import DATA, write

ADULT = DATA / "adult" / "adult_full.csv"
ARX = DATA / "arx"
GRADING = DATA / "gradings" / "adult-occupation.yaml"
MISSING = "?"   # the typing's category for missing values (missing: category)


# -- helpers ------------------------------------------------------------------------------


def invoke(*args):
    """``anonflow ARGS`` in this process (click's runner): (exit code, output)."""
    from anonflow.cli import main

    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return res.exit_code, res.output


def run_json(*args) -> dict:
    code, out = invoke("run", *args, "--json")
    assert code == 0, out
    return json.loads(out)


def view(db: Path, name: str) -> pd.DataFrame:
    """A step's table (``steps."<workflow>.<step>"``) from a store, in ``_row`` order."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f'SELECT * FROM steps."{name}" ORDER BY 1').df()
    finally:
        con.close()


def output_hash(db: Path, run_id: str, step: str) -> str:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT output_hash FROM af_step_runs WHERE run_id = ? AND step = ?",
                           [run_id, step]).fetchone()[0]
    finally:
        con.close()


def run_count(db: Path) -> int:
    if not db.exists():
        return 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM af_runs").fetchone()[0]
    except duckdb.CatalogException:
        return 0
    finally:
        con.close()


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def notes(result: dict, step: str) -> list[str]:
    return next(s for s in result["steps"] if s["step"] == step)["notes"]


def leftovers(folder: Path) -> list[str]:
    return sorted(glob.glob(str(Path(folder) / "**" / ".anonflow-work-*"), recursive=True))


def one_line_error(code: int, out: str, *needles: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    assert "Traceback" not in out
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# -- independent checks of the privacy models (pandas; no anonflow code) ------------------


def _real(values: pd.Series) -> pd.Series:
    """The sensitive values that are values: a missing one (null, NaN, the '?' category) is not."""
    return values[values.notna() & (values.astype(str) != MISSING)]


def class_sizes(df: pd.DataFrame) -> pd.Series:
    assert df["_class"].notna().all(), "a published record without a class"
    return df.groupby("_class").size()


def check_k(df: pd.DataFrame, k: int) -> None:
    sizes = class_sizes(df)
    assert sizes.min() >= k, f"a class of {sizes.min()} records, k = {k}"


def distinct_real(df: pd.DataFrame, s: str) -> pd.Series:
    return df.groupby("_class")[s].agg(lambda v: _real(v).nunique())


def check_l(df: pd.DataFrame, s: str, l: int) -> None:
    worst = distinct_real(df, s)
    assert worst.min() >= l, f"class {worst.idxmin()} holds {worst.min()} distinct real values of {s}, l = {l}"


def check_p_k(df: pd.DataFrame, s: str, p: int, k: int) -> None:
    check_k(df, k)
    check_l(df, s, p)


def check_alpha(df: pd.DataFrame, s: str, bound_of, k: int) -> None:
    """(alpha,k): each class has >= k records, some with a real value, and each real value
    is at most ``bound_of(value)`` of the class's records with a real value."""
    check_k(df, k)
    for cls, group in df.groupby("_class"):
        real = _real(group[s])
        assert len(real) > 0, f"class {cls} holds no real value of {s}"
        for value, count in real.value_counts().items():
            assert count <= bound_of(value) * len(real) + 1e-9, \
                f"class {cls}: {value!r} is {count} of {len(real)} records, bound {bound_of(value)}"


def grading_bounds(path: Path) -> dict[str, float]:
    data = yaml.safe_load(Path(path).read_text())
    return {v: float(level["alpha"]) for level in data["levels"] for v in level["values"]}


def check_constant_quasi(df: pd.DataFrame, quasi: list[str]) -> None:
    """Generalized output: every record of a class publishes the same quasi-identifier values."""
    varying = df.groupby("_class")[quasi].nunique(dropna=False).max()
    assert (varying <= 1).all(), f"quasi-identifiers vary within a class: {varying[varying > 1].to_dict()}"


def check_global_classes(out: pd.DataFrame, parts: pd.DataFrame, merged: bool = False) -> None:
    """Class ids are global: fragments linked by a shared class form runs of consecutive
    fragments (a merged group), and none at all unless fragments were merged. Ids local to
    each group would link far-apart fragments (class 0 of every group)."""
    frag = parts.set_index("_row")["_fragment"]
    joined = out[["_row", "_class"]].assign(_fragment=out["_row"].map(frag).to_numpy())
    assert joined["_fragment"].notna().all()
    spans = joined.groupby("_class")["_fragment"].agg(lambda f: sorted(set(f)))
    parent = {int(f): int(f) for f in parts["_fragment"].unique()}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for fr in spans:
        for other in fr[1:]:
            parent[find(int(other))] = find(int(fr[0]))
    comps: dict[int, list[int]] = {}
    for f in parent:
        comps.setdefault(find(f), []).append(f)
    for members in comps.values():
        members.sort()
        assert members == list(range(members[0], members[-1] + 1)), f"a class links fragments {members}"
        if not merged:
            assert len(members) == 1, f"a class spans fragments {members}, none were merged"
    # ids are 0..C-1 (each group's offset is the number of classes before it)
    ids = np.sort(joined["_class"].unique().astype(np.int64))
    assert np.array_equal(ids, np.arange(ids.size)), "class ids are not 0..C-1"


def check_every_record_once(inp: pd.DataFrame, out: pd.DataFrame, suppressed: pd.DataFrame | None = None) -> None:
    rows = list(out["_row"]) + ([] if suppressed is None else list(suppressed["_row"]))
    assert len(rows) == len(set(rows)), "a record published twice"
    assert sorted(rows) == sorted(inp["_row"]), "records lost or invented"


def test_the_independent_checks_catch_what_they_must():
    """The checks above fail on tables that break each model (so passing means something)."""
    ok = pd.DataFrame({"_row": range(6), "_class": [0, 0, 0, 1, 1, 1], "q": [1, 1, 1, 2, 2, 2],
                       "s": ["a", "b", "c", "a", "b", "c"]})
    check_k(ok, 3)
    check_l(ok, "s", 3)
    check_alpha(ok, "s", lambda v: 0.34, 3)
    check_constant_quasi(ok, ["q"])
    with pytest.raises(AssertionError):
        check_k(ok, 4)
    missing = ok.assign(s=["a", "b", MISSING, "a", "b", "c"])
    with pytest.raises(AssertionError, match="2 distinct real values"):
        check_l(missing, "s", 3)
    with pytest.raises(AssertionError):
        check_alpha(missing, "s", lambda v: 0.34, 3)   # 'a' is 1 of the 2 real values
    with pytest.raises(AssertionError):
        check_constant_quasi(ok.assign(q=[1, 1, 2, 2, 2, 2]), ["q"])
    parts = pd.DataFrame({"_row": range(6), "_fragment": [0, 0, 0, 1, 1, 1]})
    check_global_classes(ok, parts)
    with pytest.raises(AssertionError, match="spans fragments"):
        check_global_classes(ok.assign(_class=[0, 0, 1, 1, 1, 1]), parts)
    three = pd.DataFrame({"_row": range(6), "_fragment": [0, 0, 1, 1, 2, 2]})
    with pytest.raises(AssertionError, match="links fragments"):   # local ids: class 0 in fragments 0 and 2
        check_global_classes(ok.assign(_class=[0, 0, 1, 1, 0, 0]), three, merged=True)


def test_the_fragments_module_imports_on_its_own():
    run = subprocess.run([sys.executable, "-c", "from anonflow.runner.fragments import merge_neighbours; from anonflow.steps.partition_step import partition; from anonflow.steps import PartitionStep"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr.splitlines()[-1]


def test_merging_neighbours_by_hand():
    from anonflow.runner.fragments import merge_neighbours

    groups = [[0], [1], [2], [3], [4]]
    sizes = [5, 1, 9, 3, 7]
    # 1 joins its smaller neighbour 0 (5 < 9); 3 joins its smaller neighbour 4 (7 < 9), which
    # is then taken
    assert merge_neighbours(groups, sizes, [1, 3, 4]) == ([[0, 1], [2], [3, 4]], [6, 9, 10])
    # 2's only neighbour is taken by 0 + 1: it waits for the next round
    assert merge_neighbours([[0], [1], [2]], [1, 1, 1], [0, 2]) == ([[0, 1], [2]], [2, 1])
    assert merge_neighbours(groups, sizes, [0]) == ([[0, 1], [2], [3], [4]], [6, 9, 3, 7])
    assert merge_neighbours([[0, 1], [2]], [6, 9], [1]) == ([[0, 1, 2]], [15])
    assert merge_neighbours([[0]], [4], [0]) == ([[0]], [4])


# -- the partition step by hand -----------------------------------------------------------

# Each case: records, typing, partition parameters, and the fragment of each record (by
# position) worked out by hand from the rule (median = the lower median of the non-missing
# keys; left = key < median or key <= median, whichever is nearer half and leaves both parts
# non-empty; the widest column by range over its whole-table range; alike records halved by
# position; fragment ids in order, a cut fragment's two parts taking consecutive ids).
HAND = {
    # x <= 1 (six records) | {2, 3}; the six 1s are alike: halved by position (rows 0, 2, 3 | 5, 6, 7)
    "ties": ("x,d\n1,a\n2,b\n1,c\n1,a\n3,b\n1,c\n1,a\n1,b\n", "{quasi: {x: continuous}, sensitive: [d]}",
             "{max_records: 4}", [0, 2, 0, 0, 2, 1, 1, 1]),
    # median 3: x < 3 leaves 2 | 6, nearer half than x <= 3 (7 | 1)
    "strict": ("x,d\n3,a\n1,b\n3,c\n4,a\n3,b\n2,c\n3,a\n3,b\n", "{quasi: {x: continuous}, sensitive: [d]}",
               "{max_records: 6}", [1, 0, 1, 1, 1, 0, 1, 1]),
    # frequency order p (3) < q (2) < r (1): {p p p} | {q q r}; p's alike, halved; then {q q} | {r}
    "nominal": ("c,d\nr,a\np,b\nq,c\np,a\nq,b\np,c\n", "{quasi: {c: nominal}, sensitive: [d]}",
                "{max_records: 2}", [3, 0, 2, 1, 2, 1]),
    # strata a (0), b (1); in a, x spans its whole range and y nothing: cut on x at 50; in b,
    # x is constant and y spans its range: cut on y at 3
    "strata": ("s,x,y,d\nb,50,10,a\na,0,5,b\na,100,5,c\nb,50,0,a\na,50,5,b\nb,50,3,c\na,60,5,a\nb,50,7,b\n",
               "{quasi: {x: continuous, y: continuous}, sensitive: [d], insensitive: [s]}",
               "{max_records: 2, by: [s]}", [3, 0, 1, 2, 0, 2, 1, 3]),
    # strata only: a missing stratum value is a stratum of its own
    "missing": ("s,x,d\nb,1,a\n,2,b\na,3,c\nb,4,a\n,5,b\na,6,c\n",
                "{quasi: {x: continuous}, sensitive: [d], insensitive: [s], missing: category}",
                "{max_records: null, by: [s]}", None),
}


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hand")
    lines = ["name: hand", "seed: 1", "sources:"]
    steps = ["steps:"]
    for case, (csv, typing, params, _) in HAND.items():
        (folder / f"{case}.csv").write_text(csv)
        lines.append(f"  {case}: {{path: {case}.csv}}")
        steps.append(f"  {case}-t: {{uses: typing, input: {case}, with: {typing}}}")
        steps.append(f"  {case}-p: {{uses: partition, input: {case}-t, with: {params}}}")
        steps.append(f"  {case}-pub: {{uses: publish, input: {case}-p, with: {{publisher: csv, path: {case}.csv}}}}")
    wf = folder / "wf.yaml"
    wf.write_text("\n".join(lines + steps) + "\n")
    result = run_json(wf, "--db", folder / "s.duckdb")
    return folder, result


@pytest.mark.parametrize("case", [c for c, v in HAND.items() if v[3] is not None])
def test_fragments_worked_out_by_hand(hand, case):
    folder, result = hand
    got = view(folder / "s.duckdb", f"hand.{case}-p")
    assert got["_fragment"].tolist() == HAND[case][3]
    assert str(got["_fragment"].dtype) == "int64"
    limit = yaml.safe_load(HAND[case][2])["max_records"]
    assert got.groupby("_fragment").size().max() <= limit
    # the fragments table: one row per fragment, its records and each cut column's bounds
    table = view(folder / "s.duckdb", f"hand.{case}-p.fragments")
    assert table["fragment"].tolist() == sorted(got["_fragment"].unique())
    assert table["records"].tolist() == got.groupby("_fragment").size().tolist()
    summary = next(s for s in result["steps"] if s["step"] == f"{case}-p")
    assert f"{len(table)} fragment(s)" in " ".join(summary["notes"])
    cut = [c for c in got.columns if c + "_min" in table.columns]
    assert cut, table.columns
    for c in cut:
        assert table[c + "_min"].tolist() == got.groupby("_fragment")[c].min().tolist()
        assert table[c + "_max"].tolist() == got.groupby("_fragment")[c].max().tolist()


def test_strata_keep_their_values_apart_and_a_missing_value_is_a_stratum(hand):
    folder, _ = hand
    got = view(folder / "s.duckdb", "hand.missing-p")
    by_stratum = got.groupby("s")["_fragment"].agg(lambda f: sorted(set(f)))
    assert all(len(f) == 1 for f in by_stratum), by_stratum   # each stratum one fragment...
    assert got.groupby("_fragment")["s"].nunique().max() == 1   # ...and no fragment two strata
    assert by_stratum[MISSING] != by_stratum["a"] != by_stratum["b"]
    assert by_stratum["a"][0] < by_stratum["b"][0]   # strata in the order of their values
    table = view(folder / "s.duckdb", "hand.missing-p.fragments")
    assert dict(zip(table["s"], table["records"])) == {"a": 2, "b": 2, MISSING: 2}
    # strata mixed with cuts: the 'strata' case never puts a and b together
    strata = view(folder / "s.duckdb", "hand.strata-p")
    assert strata.groupby("_fragment")["s"].nunique().max() == 1


def test_the_partition_is_deterministic_and_published_without_fragment(hand, tmp_path):
    folder, result = hand
    again = run_json(folder / "wf.yaml", "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path / "out")
    assert [o["sha256"] for o in again["outputs"]] == [o["sha256"] for o in result["outputs"]]
    for case in HAND:
        a, b = view(folder / "s.duckdb", f"hand.{case}-p"), view(tmp_path / "s.duckdb", f"hand.{case}-p")
        assert a.equals(b)
        published = pd.read_csv(tmp_path / "out" / f"{case}.csv")
        assert "_fragment" not in published.columns and "_row" not in published.columns
        assert len(published) == len(a)


# -- the partition against a reference implementation -------------------------------------


def reference_fragments(keys: pd.DataFrame, strata: pd.DataFrame | None, limit: int | None) -> np.ndarray:
    """The partition rule, written plainly: ``keys`` one float column per cut column (NaN:
    missing), records in ``_row`` order; ``strata`` the ``by`` columns."""
    n = len(keys)
    if strata is not None and strata.shape[1]:
        tuples = list(map(tuple, strata.astype(object).where(strata.notna(), None).to_numpy()))
        order = sorted(set(tuples), key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))
        rank = {t: i for i, t in enumerate(order)}
        frag = np.array([rank[t] for t in tuples], dtype=np.int64)
    else:
        frag = np.zeros(n, dtype=np.int64)
    if limit is None:
        return frag
    K = keys.to_numpy(dtype=np.float64)
    span = np.nanmax(K, axis=0) - np.nanmin(K, axis=0)
    span = np.where((span == 0) | np.isnan(span), 1.0, span)
    while True:
        ids, counts = np.unique(frag, return_counts=True)
        if (counts <= limit).all():
            return frag
        new = np.empty_like(frag)
        base = 0
        for f, nf in zip(ids, counts):
            idx = np.flatnonzero(frag == f)
            if nf <= limit:
                new[idx] = base
                base += 1
                continue
            best = None      # the widest column cut evenly enough (a fiftieth of the records each side)
            fallback = None  # else the column cut most evenly
            for j in range(K.shape[1]):
                v = K[idx, j]
                real = np.sort(v[~np.isnan(v)])
                if not real.size:
                    continue
                m = real[(real.size - 1) // 2]
                lt, le = int((real < m).sum()), int((real <= m).sum())
                strict = lt > 0 and (abs(lt - nf / 2) <= abs(le - nf / 2) or le >= nf)
                left = lt if strict else le
                width = (real[-1] - real[0]) / span[j]
                smaller = min(left, nf - left)
                if not 0 < left < nf:
                    continue
                if smaller >= 0.02 * nf and (best is None or width > best[0]):
                    best = (width, j, m, strict)
                if fallback is None or smaller > fallback[0]:
                    fallback = (smaller, j, m, strict)
            best = best or fallback
            if best is None:   # alike on every column: halved by position
                new[idx[: nf // 2]] = base
                new[idx[nf // 2:]] = base + 1
            else:
                _, j, m, strict = best
                v = K[idx, j]
                with np.errstate(invalid="ignore"):
                    goes_left = (v < m) if strict else (v <= m)   # NaN: right
                new[idx] = base + np.where(goes_left, 0, 1)
            base += 2
        frag = new


def frequency_keys(values: pd.Series) -> pd.Series:
    counts = values.value_counts()
    order = sorted(counts.index, key=lambda v: (-counts[v], str(v)))
    return values.map({v: float(i) for i, v in enumerate(order)})


def synthetic(n: int = 900, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "s": rng.choice(["north", "south", "east", ""], n, p=[0.5, 0.3, 0.15, 0.05]),
        "x": np.where(rng.random(n) < 0.6, 0, rng.integers(1, 1000, n)),          # heavy ties at 0
        "y": np.round(rng.normal(50, 15, n), 2),
        "c": rng.choice(list("pqrstu"), n, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05]),
        "o": rng.choice(["low", "mid", "high"], n),
        "z": rng.choice(["101", "102", "109", "201", "205", "310"], n),
        "d": rng.choice(list("ABCDEFG"), n),
    })
    same = df.index[(df["s"] == "north")][:60]   # 60 records alike on every cut column
    df.loc[same, ["x", "y", "c", "o", "z"]] = [7, 50.0, "q", "mid", "205"]
    return df


def synthetic_keys(df: pd.DataFrame) -> pd.DataFrame:
    zs = sorted(df["z"].unique())
    return pd.DataFrame({
        "x": df["x"].astype(float), "y": df["y"].astype(float), "c": frequency_keys(df["c"]),
        "o": df["o"].map({"low": 0.0, "mid": 1.0, "high": 2.0}),
        "z": df["z"].map({z: float(i) for i, z in enumerate(zs)}),
    })


def test_the_partition_follows_its_rule_on_synthetic_data(tmp_path):
    """Continuous columns with heavy ties, nominal (frequency order), ordinal (declared
    order) and semantic (code order) columns, strata with a missing value, 60 alike records:
    the engine's fragments are exactly the reference's, record by record."""
    df = synthetic()
    df.to_csv(tmp_path / "d.csv", index=False)
    wf = write(tmp_path / "wf.yaml", """
        name: syn
        seed: 1
        sources:
          d: {path: d.csv, types: {z: VARCHAR}}
        steps:
          t:
            uses: typing
            input: d
            with:
              quasi: {x: continuous, y: continuous, c: nominal, o: {type: ordinal, order: [low, mid, high]},
                      z: {type: semantic, beta: 1, w12: 0}}
              sensitive: [d]
              insensitive: [s]
              missing: category
          strata: {uses: partition, input: t, with: {max_records: 25, by: [s]}}
          plain: {uses: partition, input: t, with: {max_records: 60}}
          two: {uses: partition, input: t, with: {max_records: 40, columns: [c, x]}}
        """)
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    keys = synthetic_keys(df)
    strata = df[["s"]].replace({"": MISSING})
    for step, k, st, limit in (("strata", keys, strata, 25), ("plain", keys, None, 60),
                               ("two", keys[["c", "x"]], None, 40)):
        got = view(tmp_path / "s.duckdb", f"syn.{step}")
        want = reference_fragments(k, st, limit)
        assert np.array_equal(got["_fragment"].to_numpy(), want), \
            f"{step}: {int((got['_fragment'].to_numpy() != want).sum())} records in another fragment"
        sizes = got.groupby("_fragment").size()
        assert sizes.max() <= limit
        assert sorted(sizes.index) == list(range(len(sizes)))
    note = " ".join(notes(result, "strata"))
    assert "c cut in frequency order" in note and "o cut in declared order" in note and "z cut in code order" in note
    # the alike records were halved by position: their fragments are runs of consecutive _row
    alike = view(tmp_path / "s.duckdb", "syn.strata").iloc[df.index[(df["x"] == 7) & (df["y"] == 50.0)]]
    assert alike["_fragment"].nunique() > 1 and alike["_fragment"].is_monotonic_increasing


def test_the_partition_follows_its_rule_on_adult_in_hierarchy_order(tmp_path):
    """ARX's Adult with its hierarchy files: nominal columns are cut in the order of their
    hierarchy (siblings next to each other), strata by sex."""
    quasi = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump({
        "name": "arxp", "seed": 1,
        "sources": {"adult": {"path": str(ARX / "adult.csv"), "delimiter": ";"}},
        "steps": {
            "first": {"uses": "filter", "input": "adult", "with": {"where": "_row < 2500"}},
            "typed": {"uses": "typing", "input": "first",
                      "with": {"quasi": {q: "continuous" if q == "age" else "nominal" for q in quasi},
                               "sensitive": ["salary-class"]}},
            "hier": {"uses": "hierarchy", "input": "typed",
                     "with": {q: {"arx": str(ARX / f"adult_hierarchy_{q}.csv")} for q in quasi}},
            "parts": {"uses": "partition", "input": "hier", "with": {"max_records": 90, "by": ["sex"]}},
            "freq": {"uses": "partition", "input": "typed", "with": {"max_records": 150}},
        }}, sort_keys=False))
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    assert "cut in hierarchy order" in " ".join(notes(result, "parts"))
    data = view(tmp_path / "s.duckdb", "arxp.parts")
    cut = [q for q in quasi if q != "sex"]
    keys = {}
    for q in cut:
        if q == "age":
            keys[q] = data[q].astype(float)
            continue
        rows = [line.split(";") for line in (ARX / f"adult_hierarchy_{q}.csv").read_text().splitlines() if line]
        leaves = sorted(tuple(reversed(r)) for r in rows)   # by the path from the top
        keys[q] = data[q].map({p[-1]: float(i) for i, p in enumerate(leaves)})
    keys = pd.DataFrame(keys)
    assert keys.notna().all().all()
    want = reference_fragments(keys, data[["sex"]], 90)
    assert np.array_equal(data["_fragment"].to_numpy(), want)
    # without hierarchies: frequency order
    freq = view(tmp_path / "s.duckdb", "arxp.freq")
    fkeys = pd.DataFrame({q: freq[q].astype(float) if q == "age" else frequency_keys(freq[q]) for q in quasi})
    assert np.array_equal(freq["_fragment"].to_numpy(), reference_fragments(fkeys, None, 150))


# -- bad parameters -------------------------------------------------------------------------

BAD = [
    ("partition, input: typed, with: {max_records: 50, by: [zz]}", "parameter 'by': no column 'zz' in the input"),
    ("partition, input: typed, with: {max_records: 50, columns: [age, zz]}",
     "parameter 'columns': no column 'zz' in the input"),
    ("partition, input: adult, with: {max_records: 50}", "partition needs a typed table"),
    ("partition, input: parts, with: {max_records: 50}", "the input is partitioned already"),
    ("partition, input: typed, with: {max_records: null}", "give 'max_records' or 'by'"),
    ("partition, input: typed, with: {max_records: null, by: []}", "give 'max_records' or 'by'"),
    ("partition, input: typed, with: {by: [_row]}", "'_row' is anonflow's own column"),
    ("partition, input: typed, with: {columns: [_fragment]}", "'_fragment' is anonflow's own column"),
    ("partition, input: typed, with: {by: [_class]}", "'_class' is anonflow's own column"),
    ("partition, input: typed, with: {max_records: 1}", "with.max_records: expected an integer >= 2"),
    ("partition, input: typed, with: {by: [sex, sex]}", "names a column twice"),
]


@pytest.mark.parametrize("step, message", BAD)
def test_bad_partition_parameters_are_one_line_naming_the_step(tmp_path, step, message):
    (tmp_path / "d.csv").write_text("age,sex,d\n30,M,a\n40,F,b\n50,M,c\n")
    wf = write(tmp_path / "wf.yaml", f"""
        name: bad
        sources: {{adult: d.csv}}
        steps:
          typed: {{uses: typing, input: adult, with: {{quasi: {{age: continuous, sex: nominal}}, sensitive: [d]}}}}
          parts: {{uses: partition, input: typed, with: {{max_records: 2}}}}
          again: {{uses: {step}}}
        """)
    with pytest.raises(WorkflowError) as err:
        from anonflow.runner.plan import build_plan
        from anonflow.registry import get_registry

        build_plan(load_workflow(wf), get_registry())
    assert "step 'again'" in str(err.value) and message in str(err.value)
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb")
    assert code == 2
    one_line_error(code, out, "step 'again'", message)
    assert run_count(tmp_path / "s.duckdb") == 0   # refused before anything ran


def test_partitioning_an_algorithms_output_is_refused_in_one_line(tmp_path):
    (tmp_path / "d.csv").write_text("age,d\n30,a\n40,b\n50,c\n60,a\n")
    wf = write(tmp_path / "wf.yaml", """
        name: bad
        sources: {adult: d.csv}
        steps:
          typed: {uses: typing, input: adult, with: {quasi: {age: continuous}, sensitive: [d]}}
          grouped: {uses: mdav, input: typed, with: {k: 2}}
          parts: {uses: partition, input: grouped, with: {max_records: 2}}
        """)
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb")
    assert code == 2
    one_line_error(code, out, "step 'parts'", "an algorithm's output")


# -- _fragment is never published -------------------------------------------------------------


def test_fragment_is_never_published(tmp_path):
    import pyarrow.parquet as pq

    wf = write(tmp_path / "wf.yaml", f"""
        name: pub
        seed: 5
        sources: {{adult: {ADULT}}}
        steps:
          sample: {{uses: sample, input: adult, with: {{n: 600}}}}
          typed:
            uses: typing
            input: sample
            with:
              quasi: [age, fnlwgt, education-num, capital-gain, capital-loss, hours-per-week]
              sensitive:
                occupation: {{grading: {GRADING}}}
              others: drop
          parts: {{uses: partition, input: typed, with: {{max_records: 100}}}}
          grouped: {{uses: mdav, input: parts, with: {{k: 5}}}}
          # (on 600 records cut to at most 100 it suppresses ~9 %, none on the whole table)
          gca: {{uses: alpha-i-k-gca, input: parts, with: {{k: 3, max_suppression: 0.3}}}}
          p-csv: {{uses: publish, input: parts, with: {{publisher: csv, path: parts.csv}}}}
          p-parquet: {{uses: publish, input: parts, with: {{publisher: parquet, path: parts.parquet, row_id: true}}}}
          g-csv: {{uses: publish, input: grouped, with: {{publisher: csv, path: grouped.csv, row_id: true}}}}
          g-parquet: {{uses: publish, input: grouped, with: {{publisher: parquet, path: grouped.parquet}}}}
          g-join: {{uses: publish, input: gca, with: {{publisher: lossy-join, path: gca, format: csv}}}}
        """)
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    files = [Path(o["path"]) for o in result["outputs"]]
    assert len(files) >= 6
    for f in files:
        if f.suffix == ".parquet":
            schema = pq.read_schema(f)
            assert "_fragment" not in schema.names, f
            assert b"_fragment" not in b"".join((schema.metadata or {}).values()), f
        else:
            assert "_fragment" not in f.read_text().splitlines()[0], f
    assert "_row" in pq.read_schema(tmp_path / "out" / "parts.parquet").names   # row_id: true keeps _row only
    grouped = view(tmp_path / "s.duckdb", "pub.grouped")
    assert "_fragment" not in grouped.columns   # nor is it in the algorithm's output table


# -- every per-fragment algorithm fed by a partition --------------------------------------

NUM_QI = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
MS_QI = ["age", "sex", "race", "education", "native-country", "workclass", "fnlwgt"]
LC_QI = ["age", "sex", "race", "marital-status", "education", "native-country", "workclass", "income"]
GCA_QI = ["age", "workclass", "education", "marital-status", "relationship", "race"]


def algorithms_workflow(n: int = 2400, max_records: int = 300) -> dict:
    """Adult samples typed as in the shipped workflows (adult-mdav, maasae-adult,
    l-clustering-adult, gca-adult), each partitioned, and every per-fragment algorithm with
    the shipped parameters."""
    src = str(ADULT)
    return {
        "name": "algos", "seed": 20261125,
        "sources": {"adult": {"path": src}, "adult-txt": {"path": src, "types": {"fnlwgt": "VARCHAR"}}},
        "steps": {
            "sample": {"uses": "sample", "input": "adult", "with": {"n": n}},
            "num": {"uses": "typing", "input": "sample",
                    "with": {"quasi": NUM_QI, "sensitive": ["occupation"], "label": ["income"], "others": "drop"}},
            "num-parts": {"uses": "partition", "input": "num", "with": {"max_records": max_records}},
            "mdav": {"uses": "mdav", "input": "num-parts", "with": {"k": 10}},
            "v-mdav": {"uses": "v-mdav", "input": "num-parts", "with": {"k": 10}},
            "grav": {"uses": "grav", "input": "num-parts", "with": {"k": 10}},
            "v-grav": {"uses": "v-grav", "input": "num-parts", "with": {"k": 10}},
            "refine": {"uses": "refine", "input": ["num-parts", "mdav"],
                       "with": {"rounds": 3, "kicks": 20, "seconds": 600}},
            "six-digit": {"uses": "filter", "input": "adult-txt", "with": {"where": "length(fnlwgt) = 6"}},
            "six-sample": {"uses": "sample", "input": "six-digit", "with": {"n": n}},
            "ms-typed": {"uses": "typing", "input": "six-sample", "with": {
                "quasi": {"age": "continuous", "sex": "nominal", "race": "nominal", "education": "nominal",
                          "native-country": "nominal", "workclass": "nominal",
                          "fnlwgt": {"type": "semantic", "beta": 1, "w12": 0}},
                "sensitive": ["occupation"], "others": "drop"}},
            "ms-parts": {"uses": "partition", "input": "ms-typed", "with": {"max_records": max_records}},
            "maasae": {"uses": "maasae", "input": "ms-parts", "with": {"k": 10, "p": 5, "objective": "apf"}},
            "lc-typed": {"uses": "typing", "input": "sample",
                         "with": {"quasi": LC_QI, "sensitive": ["occupation"], "others": "drop"}},
            "lc-parts": {"uses": "partition", "input": "lc-typed", "with": {"max_records": max_records}},
            "l-clustering": {"uses": "l-clustering", "input": "lc-parts", "with": {"l": 5}},
            "gca-typed": {"uses": "typing", "input": "sample", "with": {
                "quasi": GCA_QI, "sensitive": {"occupation": {"grading": str(GRADING)}}, "others": "drop"}},
            "gca-parts": {"uses": "partition", "input": "gca-typed", "with": {"max_records": max_records}},
            "alpha-k-gca": {"uses": "alpha-k-gca", "input": "gca-parts",
                            "with": {"k": 4, "alpha": 0.5, "choice": "nearest"}},
            "alpha-i-k-gca": {"uses": "alpha-i-k-gca", "input": "gca-parts",
                              "with": {"k": 4, "per": "value", "choice": "nearest"}},
            "gca-published": {"uses": "publish", "input": "alpha-i-k-gca",
                              "with": {"publisher": "lossy-join", "path": "gca-adult", "format": "csv"}},
        },
    }


@pytest.fixture(scope="module")
def algos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("algos")
    wf = folder / "wf.yaml"
    wf.write_text(yaml.safe_dump(algorithms_workflow(), sort_keys=False))
    result = run_json(wf, "--db", folder / "s.duckdb")
    assert leftovers(folder) == []
    return folder, result


def _bounds_alpha(alpha):
    return lambda value: alpha


# step: (its partition, its claim checked here, quasi-identifiers, generalized quasi-identifiers)
ALGORITHMS = {
    "mdav": ("num-parts", lambda df: check_k(df, 10), NUM_QI, True),
    "v-mdav": ("num-parts", lambda df: check_k(df, 10), NUM_QI, True),
    "grav": ("num-parts", lambda df: check_k(df, 10), NUM_QI, True),
    "v-grav": ("num-parts", lambda df: check_k(df, 10), NUM_QI, True),
    "refine": ("num-parts", lambda df: check_k(df, 10), NUM_QI, True),   # refine keeps the given k
    "maasae": ("ms-parts", lambda df: check_p_k(df, "occupation", 5, 10), MS_QI, True),
    "l-clustering": ("lc-parts", lambda df: check_l(df, "occupation", 5), LC_QI, True),
    "alpha-k-gca": ("gca-parts", lambda df: check_alpha(df, "occupation", _bounds_alpha(0.5), 4), GCA_QI, False),
    "alpha-i-k-gca": ("gca-parts", lambda df: check_alpha(df, "occupation", grading_bounds(GRADING).__getitem__, 4),
                      GCA_QI, False),
}


@pytest.mark.parametrize("step", list(ALGORITHMS))
def test_each_algorithm_on_a_partition_accounts_for_every_record_in_global_classes(algos, step):
    folder, result = algos
    db = folder / "s.duckdb"
    parts_step, claim, quasi, generalized = ALGORITHMS[step]
    parts = view(db, f"algos.{parts_step}")
    out = view(db, f"algos.{step}")
    fragments = parts["_fragment"].nunique()
    assert fragments >= 8, "the sample should be cut in many fragments"
    assert "_fragment" not in out.columns
    con = duckdb.connect(str(db), read_only=True)
    try:
        has_suppressed = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'steps' "
                                     "AND table_name = ?", [f"algos.{step}.suppressed"]).fetchone()[0]
    finally:
        con.close()
    suppressed = view(db, f"algos.{step}.suppressed") if has_suppressed else None
    check_every_record_once(parts, out, suppressed)
    step_notes = " ".join(notes(result, step))
    assert "fragment group(s)" in step_notes and "on local" in step_notes
    check_global_classes(out, parts, merged="merged with" in step_notes)
    claim(out)
    if generalized:
        check_constant_quasi(out, quasi)


def test_the_models_hold_by_pycanon_too(algos):
    """pycanon, on the published values: k-anonymity and (distinct) l-diversity over the
    quasi-identifiers where they are generalized, over the class id where they are kept
    exact (lossy-join publication: a class is what links a QI row to its sensitive values)."""
    anonymity = pytest.importorskip("pycanon.anonymity")
    folder, _ = algos
    db = folder / "s.duckdb"
    for step in ("mdav", "v-mdav", "grav", "v-grav", "refine"):
        df = view(db, f"algos.{step}")
        assert anonymity.k_anonymity(df, NUM_QI) >= 10, step
    ms = view(db, "algos.maasae")
    assert anonymity.k_anonymity(ms, MS_QI) >= 10
    assert anonymity.l_diversity(ms, MS_QI, ["occupation"]) >= 5
    lc = view(db, "algos.l-clustering")
    assert anonymity.l_diversity(lc, LC_QI, ["occupation"]) >= 5
    for step in ("alpha-k-gca", "alpha-i-k-gca"):
        df = view(db, f"algos.{step}")
        assert anonymity.k_anonymity(df, ["_class"]) >= 4, step
    alpha, k = anonymity.alpha_k_anonymity(view(db, "algos.alpha-k-gca"), ["_class"], ["occupation"])
    assert alpha <= 0.5 + 1e-9 and k >= 4


def test_the_lossy_join_publication_of_a_partitioned_run(algos):
    folder, result = algos
    files = sorted(Path(o["path"]).name for o in result["outputs"])
    assert files == ["gca-adult-qi.csv", "gca-adult-sa.csv"]
    for name in files:
        header = (folder / "out" / name).read_text().splitlines()[0]
        assert "_fragment" not in header and "_row" not in header


# -- the lattice: one search over summed frequency tables ----------------------------------

ARX_QI = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]


def lattice_workflow(records: int = 3000, max_records: int = 300) -> dict:
    """ARX's example (workflows/arx-adult-k5.yaml) on its first records; each lattice
    configuration run on the partition and on the whole table, both published."""
    configs = {
        "k5": {"model": "k-anonymity", "model_params": {"k": 5}, "suppression": 0.0, "utility": "loss"},
        "l2": {"model": "l-diversity", "model_params": {"l": 2}, "suppression": 0.02, "utility": "entropy-loss"},
        # not a hierarchy loss: the search needs the records, so it cannot sum fragments' summaries
        "rd": {"model": "k-anonymity", "model_params": {"k": 5}, "suppression": 0.0,
               "utility": "reconstruction-distance"},
    }
    steps = {
        "first": {"uses": "filter", "input": "adult", "with": {"where": f"_row < {records}"}},
        "typed": {"uses": "typing", "input": "first",
                  "with": {"quasi": {q: "continuous" if q == "age" else "nominal" for q in ARX_QI},
                           "sensitive": ["salary-class"]}},
        "hier": {"uses": "hierarchy", "input": "typed",
                 "with": {q: {"arx": str(ARX / f"adult_hierarchy_{q}.csv")} for q in ARX_QI}},
        "parts": {"uses": "partition", "input": "hier", "with": {"max_records": max_records}},
    }
    for name, params in configs.items():
        for where, source in (("parts", "parts"), ("whole", "hier")):
            steps[f"{name}-{where}"] = {"uses": "lattice", "input": source, "with": params}
            steps[f"{name}-{where}-csv"] = {"uses": "publish", "input": f"{name}-{where}",
                                            "with": {"publisher": "csv", "path": f"{name}-{where}.csv"}}
    return {"name": "lat", "seed": 20261125,
            "sources": {"adult": {"path": str(ARX / "adult.csv"), "delimiter": ";"}}, "steps": steps}


def test_the_lattice_on_a_partition_publishes_the_same_bytes(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump(lattice_workflow(), sort_keys=False))
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    out = tmp_path / "out"
    for name in ("k5", "l2", "rd"):
        assert sha(out / f"{name}-parts.csv") == sha(out / f"{name}-whole.csv"), name
        assert output_hash(tmp_path / "s.duckdb", result["run_id"], f"{name}-parts") == \
            output_hash(tmp_path / "s.duckdb", result["run_id"], f"{name}-whole")
    fragments = view(tmp_path / "s.duckdb", "lat.parts")["_fragment"].nunique()
    assert fragments >= 8
    for name in ("k5", "l2"):   # summarized per fragment, summed, searched once
        text = " ".join(notes(result, f"{name}-parts"))
        assert f"summaries of {fragments} fragment(s) on local summed" in text, text
    text = " ".join(notes(result, "rd-parts"))
    assert "does not run per fragment" in text and "whole table" in text and "summaries" not in text
    code, plan = invoke("plan", wf)
    assert code == 0, plan
    block = plan.split("k5-parts  [algorithm")[1].split("k5-parts-csv")[0]
    assert "each fragment's summary is computed where it lies and summed" in block
    block = plan.split("rd-parts  [algorithm")[1].split("rd-parts-csv")[0]
    assert "does not run per fragment: it runs on the whole table" in block


# -- fragments too poor for the claimed model are merged -----------------------------------

# strata a (8 records, 4 sensitive values), b (6 records: 2 values and 2 missing), c (10
# records, 5 values): taken as one class, b fails l = 3 (a missing value is no value) and is
# merged with its smaller neighbour, a.
MERGE_CSV = "s,age,sex,d\n" + "".join(
    f"{s},{age},{sex},{d}\n" for s, age, sex, d in [
        *(("a", 20 + i, "MF"[i % 2], f"x{i % 4 + 1}") for i in range(8)),
        *(("b", 40 + i, "MF"[i % 2], ["x1", "x2", "", "x1", "x2", ""][i]) for i in range(6)),
        *(("c", 60 + i, "MF"[i % 2], f"x{i % 5 + 1}") for i in range(10)),
    ])


def merge_workflow(folder: Path, l: int = 3) -> Path:
    (folder / "d.csv").write_text(MERGE_CSV)
    return write(folder / "wf.yaml", f"""
        name: merge
        seed: 3
        sources: {{d: d.csv}}
        steps:
          typed:
            uses: typing
            input: d
            with: {{quasi: {{age: continuous, sex: nominal}}, sensitive: [d], insensitive: [s], missing: category}}
          parts: {{uses: partition, input: typed, with: {{max_records: null, by: [s]}}}}
          lc: {{uses: l-clustering, input: parts, with: {{l: {l}}}}}
          ms: {{uses: maasae, input: parts, with: {{k: 3, p: 3}}}}
          lc-csv: {{uses: publish, input: lc, with: {{publisher: csv, path: lc.csv}}}}
        """)


def test_a_fragment_too_poor_for_the_model_is_merged_with_a_neighbour(tmp_path):
    wf = merge_workflow(tmp_path)
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    db = tmp_path / "s.duckdb"
    assert run_count(db) == 1
    parts = view(db, "merge.parts")
    assert parts.groupby("s")["_fragment"].first().to_dict() == {"a": 0, "b": 1, "c": 2}
    for step, model, checker in (("lc", "l-diversity", lambda df: check_l(df, "d", 3)),
                                 ("ms", "p-sensitive-k-anonymity", lambda df: check_p_k(df, "d", 3, 3))):
        text = " ".join(notes(result, step))
        assert re.search(rf"2 fragment\(s\) too small or too poor for [^:]*{model}[^:]* \(each taken as one class\) "
                         r"were merged with neighbours into 1 group\(s\): 0\+1", text), text
        assert "ran on 2 fragment group(s)" in text
        out = view(db, f"merge.{step}")
        check_every_record_once(parts, out)
        checker(out)
        check_global_classes(out, parts, merged=True)
        # classes lie in the group 0+1 or in fragment 2, never across
        spans = out.assign(f=out["_row"].map(parts.set_index("_row")["_fragment"])).groupby("_class")["f"].agg(set)
        assert all(f <= {0, 1} or f == {2} for f in spans), spans
    # the plan says so before anything runs
    code, plan = invoke("plan", wf)
    assert code == 0, plan
    block = plan.split("lc  [algorithm")[1].split("ms  [algorithm")[0]
    assert "l-clustering runs once per fragment group: 2 group(s) of 10..14" in block, block
    assert "were merged with neighbours into 1 group(s): 0+1" in block
    part_block = plan.split("parts  [partition")[1].split("lc  [algorithm")[0]
    assert "3 fragment(s) of 6..10 (median 8) records" in part_block, part_block
    code, out = invoke("plan", wf, "--json")
    steps = {s["name"]: s for s in json.loads(out)["steps"]}
    assert steps["parts"]["fragments"] == {"fragments": 3, "sizes": {"min": 6, "median": 8, "max": 10}, "cuts": 0}
    assert any("0+1" in n for n in steps["lc"]["notes"])


def test_the_partition_note_counts_the_strata(tmp_path):
    wf = merge_workflow(tmp_path)
    code, plan = invoke("plan", wf)
    assert code == 0, plan
    assert "3 fragment(s) of 6..10 (median 8) records in 3 strata" in plan, plan


def test_the_plan_shows_the_fragments_and_the_groups(tmp_path):
    wf = tmp_path / "wf.yaml"
    data = algorithms_workflow(n=1200, max_records=200)
    data["steps"] = {k: v for k, v in data["steps"].items() if k in ("sample", "num", "num-parts", "mdav")}
    data["sources"].pop("adult-txt")
    wf.write_text(yaml.safe_dump(data, sort_keys=False))
    code, plan = invoke("plan", wf)
    assert code == 0, plan
    part_block = plan.split("num-parts  [partition")[1].split("mdav  [algorithm")[0]
    m = re.search(r"(\d+) fragment\(s\) of (\d+)\.\.(\d+) \(median (\d+)\) records", part_block)
    assert m, part_block
    assert "max_records = 200" in part_block
    result = run_json(wf, "--db", tmp_path / "s.duckdb")
    sizes = view(tmp_path / "s.duckdb", "algos.num-parts").groupby("_fragment").size()
    assert (int(m[1]), int(m[2]), int(m[3]), int(m[4])) == (len(sizes), sizes.min(), sizes.max(),
                                                            int(np.median(sizes)))
    # the groups the plan announces are those the run uses, merges included (with 1,200 records
    # cut to at most 200, a cut splits off a fragment of fewer than k = 10 records)
    algo_block = plan.split("mdav  [algorithm")[1]
    groups = re.search(r"mdav runs once per fragment group: (\d+) group\(s\) of (\S+) ", algo_block)
    assert groups, algo_block
    run_notes = notes(result, "mdav")
    assert any(n.startswith(f"mdav ran on {groups[1]} fragment group(s) of {groups[2]} ") for n in run_notes), run_notes
    plan_merges = [ln.strip() for ln in algo_block.splitlines() if "merged with neighbours" in ln]
    assert plan_merges == [n for n in run_notes if "merged with neighbours" in n]
    merged = sum(len(g.split("+")) for g in re.findall(r"\d+(?:\+\d+)+", " ".join(plan_merges)))
    assert int(groups[1]) == len(sizes) - merged + len(re.findall(r"\d+(?:\+\d+)+", " ".join(plan_merges)))
    assert (sizes < 10).any() == bool(plan_merges)


# -- the same bytes on every executor ----------------------------------------------------------


EXECUTOR_STEPS = ("mdav", "l-clustering")


def executors_workflow(n: int = 1200, max_records: int = 120, algorithms=EXECUTOR_STEPS) -> dict:
    """mdav and l-clustering (as in the shipped workflows) on partitioned Adult samples, published."""
    return only(algorithms_workflow(n=n, max_records=max_records), algorithms, "exec")


def only(data: dict, algorithms, name: str) -> dict:
    """``data`` with the steps ``algorithms`` need (and their sources), each published."""
    keep, todo = set(), list(algorithms)
    while todo:
        step = todo.pop()
        if step in keep or step not in data["steps"]:
            continue
        keep.add(step)
        given = data["steps"][step]["input"]
        todo += given if isinstance(given, list) else [given]
    steps = {k: v for k, v in data["steps"].items() if k in keep}
    used = {v["input"] for v in steps.values() if isinstance(v["input"], str)}
    for step in algorithms:
        steps[f"{step}-out"] = {"uses": "publish", "input": step,
                                "with": {"publisher": "parquet", "path": f"{step}.parquet"}}
    return {**data, "name": name, "sources": {k: v for k, v in data["sources"].items() if k in used},
            "steps": steps}


@pytest.fixture(scope="module")
def cluster():
    """An external Dask cluster: a LocalCluster of two worker processes (with nannies)."""
    import logging

    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                       silence_logs=logging.ERROR)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


def published(result: dict) -> dict[str, str]:
    return {Path(o["path"]).name: o["sha256"] for o in result["outputs"]}


@pytest.fixture(scope="module")
def executors_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exec")
    wf = folder / "wf.yaml"
    wf.write_text(yaml.safe_dump(executors_workflow(), sort_keys=False))
    runs = {}

    def run(executor: str) -> dict:
        if executor not in runs:
            tag = re.sub(r"\W", "_", executor)
            db = folder / f"{tag}.duckdb"
            result = run_json(wf, "--db", db, "--out-dir", folder / tag, "--executor", executor)
            assert leftovers(folder / tag) == []
            runs[executor] = result, db
        return runs[executor]

    return run


@pytest.mark.parametrize("executor", ["processes:2", "dask:1", "dask:2", "external"])
def test_every_executor_publishes_the_same_bytes(executors_runs, executor, request):
    pytest.importorskip("distributed")
    base, base_db = executors_runs("local")
    if executor == "external":
        cluster, client = request.getfixturevalue("cluster")
        client.wait_for_workers(2, timeout=60)
        executor = f"dask:{cluster.scheduler_address}"
        assert executor.startswith("dask:tcp://127.0.0.1:")
    result, db = executors_runs(executor)
    assert published(result) == published(base)
    assert len(published(base)) == len(EXECUTOR_STEPS)
    for step in EXECUTOR_STEPS:
        assert output_hash(db, result["run_id"], step) == output_hash(base_db, base["run_id"], step), step
        text = " ".join(notes(result, step))
        where = {"processes:2": "on processes:2", "dask:1": "LocalCluster of 1 worker)",
                 "dask:2": "LocalCluster of 2 workers"}.get(executor, f"on {executor}")
        assert where in text, text
    if executor in ("processes:2", "dask:2") or executor.startswith("dask:tcp"):
        # the fragments really were spread over the workers
        text = " ".join(notes(result, "l-clustering"))
        assert re.search(r"in 2 process\(es\)", text), text


# -- a worker killed mid-run ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_workflow(tmp_path_factory):
    """l-clustering on 3,000 Adult records cut into ~35 fragment groups, and its bytes on the
    local executor (undisturbed)."""
    folder = tmp_path_factory.mktemp("fault")
    wf = folder / "wf.yaml"
    wf.write_text(yaml.safe_dump(executors_workflow(n=3000, max_records=150, algorithms=("l-clustering",)),
                                 sort_keys=False))
    base = run_json(wf, "--db", folder / "local.duckdb", "--out-dir", folder / "local")
    groups = int(re.search(r"ran on (\d+) fragment group", " ".join(notes(base, "l-clustering")))[1])
    assert groups >= 20
    return wf, published(base), groups


def run_and_kill(wf: Path, tag: str, executor: str, victims) -> tuple[dict, dict]:
    """``anonflow run`` in a child process; once the first fragment group's result is in
    the work folder (the run is under way, most groups still to run), SIGKILL the worker
    ``victims()`` names. Returns the run's JSON and what was killed when."""
    folder = wf.parent
    out = folder / tag
    proc = subprocess.Popen([sys.executable, "-m", "anonflow", "run", str(wf), "--db", str(folder / f"{tag}.duckdb"),
                             "--out-dir", str(out), "--executor", executor, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: dict = {}
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            work = glob.glob(str(out / ".anonflow-work-l-clustering-*"))
            results = glob.glob(str(out / ".anonflow-work-l-clustering-*" / "result-*.parquet")) if work else []
            if results:
                pid = victims(proc)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed = {"pid": pid, "results_before": len(results), "run_alive": proc.poll() is None}
                    break
            # every 2 ms once the step's work folder is there (its first result is near);
            # before, while the run starts and the steps before it run, every 20 ms
            time.sleep(0.002 if work else 0.02)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    return json.loads(stdout), killed


def test_a_process_worker_killed_mid_run_changes_nothing(fault_workflow):
    """processes:2: a pool worker killed mid-run breaks the pool; the groups not yet done run
    again on a new one, and the output is the same bytes."""
    psutil = pytest.importorskip("psutil")
    wf, expected, groups = fault_workflow

    def worker(proc):
        kids = psutil.Process(proc.pid).children(recursive=True)
        pool = [k for k in kids if "spawn_main" in " ".join(k.cmdline())]
        return pool[0].pid if pool else None

    result, killed = run_and_kill(wf, "processes", "processes:2", worker)
    assert killed and killed["run_alive"], "no worker was killed while the run was under way"
    assert killed["results_before"] < groups
    try:
        assert psutil.Process(killed["pid"]).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    assert published(result) == expected
    assert leftovers(wf.parent / "processes") == []


def test_a_dask_worker_killed_mid_run_changes_nothing(fault_workflow, cluster):
    """An external Dask cluster: a worker process killed mid-run (its nanny starts another);
    the scheduler runs its fragment groups elsewhere, and the output is the same bytes."""
    wf, expected, groups = fault_workflow
    scheduler, client = cluster
    client.wait_for_workers(2, timeout=60)
    pids = client.run(os.getpid)   # worker address -> pid

    def busy_worker(proc):
        processing = client.processing()
        busy = [w for w, keys in processing.items() if any(str(k).startswith("anonflow-") for k in keys)]
        return pids.get(busy[0]) if busy else None

    result, killed = run_and_kill(wf, "dask", f"dask:{scheduler.scheduler_address}", busy_worker)
    assert killed and killed["run_alive"], "no worker was killed while the run was under way"
    assert killed["pid"] in pids.values() and killed["results_before"] < groups
    assert published(result) == expected
    assert leftovers(wf.parent / "dask") == []
    client.wait_for_workers(2, timeout=60)   # the nanny restarts it: the cluster is whole again


# -- executor settings that are refused ------------------------------------------------------


def test_an_unreachable_scheduler_fails_in_one_line_before_a_run_is_recorded(tmp_path):
    wf = merge_workflow(tmp_path)
    db = tmp_path / "s.duckdb"
    code, out = invoke("run", wf, "--db", db, "--executor", "dask:tcp://127.0.0.1:1")
    assert code == 2
    one_line_error(code, out, "cannot reach the Dask scheduler at tcp://127.0.0.1:1")
    assert run_count(db) == 0
    assert not (tmp_path / "out").exists() or leftovers(tmp_path / "out") == []


EXECUTOR_BLOCKS = [
    ('{kind: dask, address: "tcp://10.1.2.3:8786"}', "may not name a Dask scheduler"),
    ('"dask:tcp://10.1.2.3:8786"', "may not name a Dask scheduler"),
    ('{kind: dask, address: "tcp://localhost.example.com:8786"}', "may not name a Dask scheduler"),
    ('{kind: dask, address: "tcp://0.0.0.0:8786"}', "may not name a Dask scheduler"),
    # not even on this machine: any local user may listen there (anonflow.egress)
    ('{kind: dask, address: "tcp://127.0.0.1:8786"}', "may not name a Dask scheduler"),
    ('"dask:tcp://localhost:8786"', "may not name a Dask scheduler"),
    ("{work_dir: ../elsewhere}", "lies outside the workflow's folder"),
    ("{work_dir: /tmp}", "lies outside the workflow's folder"),
    ("{kind: processes, workers: 2, work_dir: inside/../../out}", "lies outside the workflow's folder"),
    ("processes:0", "'workers' must be a whole number from 1 to 4096"),
    ("{kind: processes, workers: true}", "executor.workers: expected an integer >= 1"),
    ("local:3", "the local executor runs one fragment at a time"),
    ("spark", "unknown executor 'spark'"),
    ("{kind: spark}", "executor.kind must be one of local, processes, dask"),
    ('{kind: processes, address: "tcp://127.0.0.1:8786"}', "an address is for the dask executor"),
    ('{kind: dask, workers: 2, address: "tcp://127.0.0.1:8786"}', "not both"),
    ("{kind: dask, nodes: 3}", "unknown key 'nodes'"),
    ('"dask:scheduler-host"', "expected a Dask scheduler address"),
    ("[dask]", "expected local, processes:N"),
]


@pytest.mark.parametrize("block, message", EXECUTOR_BLOCKS)
def test_a_bad_or_hostile_executor_block_is_refused_at_load(tmp_path, block, message):
    wf = merge_workflow(tmp_path)
    wf.write_text(wf.read_text().replace("seed: 3", f"seed: 3\nexecutor: {block}"))
    with pytest.raises(WorkflowError) as err:
        load_workflow(wf)
    assert message in str(err.value) and "executor" in str(err.value)
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb")
    assert code == 2
    one_line_error(code, out, message)
    assert run_count(tmp_path / "s.duckdb") == 0


def test_a_local_cluster_and_a_work_dir_inside_the_folder_are_accepted(tmp_path):
    wf = merge_workflow(tmp_path)
    for block, want in (("dask:3", ("dask", 3, None)), ("processes:2", ("processes", 2, None)),
                        ("{kind: processes, workers: 2, work_dir: scratch}", ("processes", 2, None))):
        text = merge_workflow(tmp_path).read_text().replace("seed: 3", f"seed: 3\nexecutor: {block}")
        wf.write_text(text)
        spec = load_workflow(wf).executor
        assert (spec.kind, spec.workers, spec.address) == want, block
    assert spec.work_dir == str((tmp_path / "scratch").resolve())


@pytest.mark.parametrize("flag, message", [
    ("processes:0", "'workers' must be a whole number from 1 to 4096"),
    ("local:3", "the local executor runs one fragment at a time"),
    ("spark:2", "unknown executor 'spark'"),
    ("dask:scheduler-host", "expected a Dask scheduler address"),
    ("processes:tcp://127.0.0.1:1", "an address is for the dask executor"),
])
def test_a_bad_executor_flag_is_one_line(tmp_path, flag, message):
    wf = merge_workflow(tmp_path)
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb", "--executor", flag)
    assert code == 2
    one_line_error(code, out, "--executor", message)
    assert run_count(tmp_path / "s.duckdb") == 0


class EngineBug(AssertionError):
    """Raised by a test for a bug it reproduces (its xfail names this class)."""


def test_the_plan_does_not_connect_to_the_scheduler(tmp_path, monkeypatch):
    from anonflow.runner import fragments as runner
    from anonflow.errors import InputError

    started = []

    def unreachable(spec, where=""):
        started.append(spec)
        raise InputError(f"cannot reach the Dask scheduler at {spec.address}", where=where)

    monkeypatch.setattr(runner, "start_executor", unreachable)
    wf = merge_workflow(tmp_path)
    # (a workflow file names no scheduler address: only --executor does, and plan takes none)
    wf.write_text(wf.read_text().replace("seed: 3", "seed: 3\nexecutor: {kind: dask, workers: 2}"))
    code, out = invoke("plan", wf)
    if started or code != 0:
        raise EngineBug(f"anonflow plan started the executor: {out}")
    assert "were merged with neighbours" in out


# -- the work folder never stays behind -------------------------------------------------------


class Spy:
    """What a fragment run sees of the work folders (set by the algorithm below)."""

    folders: list[str] = []
    watch: list[Path] = []


def _spy_algorithm(crash: bool = False):
    from anonflow.api import CLASS, Algorithm

    class SpyAlgorithm(Algorithm):
        name = "test.crash" if crash else "test.spy"
        version = "1"

        def run(self, table, params, ctx):
            import pyarrow as pa

            for folder in Spy.watch:
                Spy.folders += glob.glob(str(folder / ".anonflow-work-*"))
            if crash:
                raise ZeroDivisionError("boom")
            # every record of the fragment group in class 0: the engine must make ids global
            return table.replace(data=table.data.append_column(CLASS, pa.array([0] * table.num_rows, pa.int64())))

    return SpyAlgorithm()


def _use(*algorithms):
    from tests.support.mockplugins import Provider, use

    return use(Provider(algorithms=list(algorithms)))


def test_the_work_folder_is_private_used_and_removed(tmp_path):
    """A mock algorithm (local executor) sees the step's work folder inside the output folder
    (or --work-dir), mode 0700; after the run nothing of it is left. It puts each fragment
    group in its class 0: the engine numbers them 0, 1, 2 (one class per fragment)."""
    _use(_spy_algorithm())
    wf = merge_workflow(tmp_path)
    wf.write_text(wf.read_text().replace("uses: l-clustering, input: parts, with: {l: 3}",
                                         "uses: test.spy, input: parts"))
    work = tmp_path / "work"
    for i, extra in enumerate(([], ["--work-dir", work])):
        out = tmp_path / f"out{i}"
        Spy.folders, Spy.watch = [], [out, work]
        result = run_json(wf, "--db", tmp_path / f"s{len(extra)}.duckdb", "--out-dir", out, *extra)
        where = work if extra else out
        assert Spy.folders and all(Path(f).parent == where for f in Spy.folders), Spy.folders
        assert len(set(Spy.folders)) == 1   # one folder for the step
        assert leftovers(out) == [] and leftovers(work) == []
        spied = view(tmp_path / f"s{len(extra)}.duckdb", "merge.lc")
        parts = view(tmp_path / f"s{len(extra)}.duckdb", "merge.parts")
        assert spied.groupby("_class")["_row"].apply(list).tolist() == \
            parts.groupby("_fragment")["_row"].apply(list).tolist()
        assert "ran on 3 fragment group(s)" in " ".join(notes(result, "lc"))


def test_the_work_folder_mode_is_0700():
    from anonflow.runner.executors import WorkFolder

    import tempfile

    with tempfile.TemporaryDirectory() as parent:
        work = WorkFolder(Path(parent), "step/../name")
        try:
            assert work.path.parent == Path(parent) and work.path.name.startswith(".anonflow-work-step_.._name-")
            assert oct(work.path.stat().st_mode & 0o777) == "0o700"
        finally:
            work.remove()
        assert not work.path.exists()


def test_no_work_folder_stays_behind_a_failed_run(tmp_path):
    # the algorithm's check fails even on the whole table (5 distinct values, l = 6)
    wf = merge_workflow(tmp_path, l=6)
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb")
    assert code == 2
    one_line_error(code, out, "step 'lc'", "'l' = 6")
    assert leftovers(tmp_path) == []
    # an algorithm that crashes in its fragment
    _use(_spy_algorithm(crash=True))
    wf.write_text(wf.read_text().replace("uses: l-clustering, input: parts, with: {l: 6}",
                                         "uses: test.crash, input: parts"))
    Spy.folders, Spy.watch = [], [tmp_path / "out"]
    code, out = invoke("run", wf, "--db", tmp_path / "s2.duckdb")
    assert code == 1 and "ZeroDivisionError" in out and "step 'lc'" in out
    assert Spy.folders and leftovers(tmp_path) == []


# -- refine after a partitioned microaggregation whose fragments were merged -----------------


@pytest.fixture(scope="module")
def refine_folder(tmp_path_factory) -> Path:
    """The folder and store of both refine tests: the steps before refine are the same in
    both, computed by the first to run and taken from the store's cache by the other."""
    return tmp_path_factory.mktemp("refine")


def refine_after_merged_mdav(tmp_path: Path, refine: dict) -> tuple[int, str, Path]:
    """mdav (k = 10) on 1,200 Adult records in strata of education-num, cut to at most 200:
    rare education levels are strata of fewer than 10 records, merged with a neighbour, so a
    class of mdav spans two fragments; then refine on [the partition, mdav's classes]. (The
    tables checked are those of this run: refine's is computed again whatever the cache holds,
    its parameters differ.)"""
    data = only(algorithms_workflow(n=1200, max_records=200), ("refine",), "refine")
    data["steps"]["num-parts"]["with"]["by"] = ["education-num"]
    data["steps"]["refine"]["with"] = refine
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = invoke("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    db = tmp_path / "s.duckdb"
    mdav = view(db, "refine.mdav")
    parts = view(db, "refine.num-parts")
    check_k(mdav, 10)
    spans = mdav.assign(f=mdav["_row"].map(parts.set_index("_row")["_fragment"])).groupby("_class")["f"].nunique()
    assert (spans > 1).any(), "precondition: a class of mdav spans two fragments"
    return code, out, db


def test_refine_after_a_merged_partition_keeps_the_given_k(refine_folder):
    code, out, db = refine_after_merged_mdav(refine_folder, {"rounds": 3, "kicks": 0})
    assert code == 0, out
    smallest = int(view(db, "refine.refine").groupby("_class").size().min())
    if smallest < 10:
        raise EngineBug(f"refine published a class of {smallest} record(s) from mdav's k = 10 partition")


def test_refine_with_k_after_a_merged_partition_runs(refine_folder):
    code, out, db = refine_after_merged_mdav(refine_folder, {"k": 10, "rounds": 3, "kicks": 0})
    if code != 0:
        raise EngineBug(out)
    check_k(view(db, "refine.refine"), 10)
