"""(alpha_i,k)-GCA and (alpha,k)-GCA, lossy-join publication, and their checks and metrics
(SPEC sections 3 and 7, seed 002).

Ds({1,2,3,3}) = 1.042 and Ds({3,4,5,5}) = 1.158 are tested in test_grading.py; here the
metric's averaging over classes is tested, not Ds itself again.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from anonflow.errors import InputError
from anonflow.grading import load_grading, parse_grading
from anonflow.hierarchy import Hierarchy
from anonflow_std.common.distance import record_distances
from anonflow_std.common.encode import encode
from anonflow.schema import CLASS, ROW, Attribute, Typing
from anonflow.table import TypedTable
from anonflow.testing import make_context
from anonflow_std.clustering.gca import AlphaIKGca, AlphaKGca, gca_partition
from anonflow_std.privacy.alphak import AlphaIKAnonymity, AlphaKAnonymity, alpha_report
from anonflow_std.common.counts import pair_consistency_sql, pair_counts_sql, table_counts_sql
from anonflow_std.risk.sensitivity import SensitivityDistance
from anonflow_std.utility.reconstruction import ReconstructionDistance

from tests.support.helpers import DATA, WORKFLOWS, census_workflow

ADULT_QI = {"age": "continuous", "workclass": "nominal", "education": "nominal", "marital-status": "nominal",
            "relationship": "nominal", "race": "nominal"}
GRADING_FILE = DATA / "gradings" / "adult-occupation.yaml"


def adult_grading() -> dict:
    return load_grading(str(GRADING_FILE), DATA, where="test")


def make_table(columns: dict, quasi: dict, sensitive: str, grading: dict | None = None) -> TypedTable:
    n = len(next(iter(columns.values())))
    data = pa.table({ROW: pa.array(np.arange(n), pa.int64()), **{k: pa.array(v) for k, v in columns.items()}})
    attrs = tuple(Attribute(c, "quasi", t) for c, t in quasi.items()) + (
        Attribute(sensitive, "sensitive", "nominal", options={"grading": grading} if grading else {}),)
    return TypedTable(data, Typing(attrs))


@pytest.fixture(scope="module")
def adult(adult_full) -> TypedTable:
    """Adult's 30,162 complete training records, seed 002's six QIs, occupation graded."""
    table = adult_full.slice(0, 30162)
    return make_table({c: table.column(c) for c in [*ADULT_QI, "occupation"]}, ADULT_QI, "occupation",
                      adult_grading())


def full_params(algo, **given):
    p = {"choice": "nearest", "sensitive": None, **given}
    if isinstance(algo, AlphaIKGca):
        p.setdefault("per", "value")
    return p


def run(algo, table, seed=0, **given):
    """Run like the engine: check, run, attach the claims, split off suppressed records."""
    params = full_params(algo, **given)
    algo.check(params, table=table)
    out = algo.run(table, params, make_context(seed=seed))
    out = out.replace(claims=algo.claims(params))
    assert out.num_rows == table.num_rows and sorted(out.rows()) == sorted(table.rows())
    keep = pa.compute.is_valid(out.data.column(CLASS))
    published = out.replace(data=out.data.filter(keep))
    suppressed = out.data.filter(pa.compute.invert(keep))
    return published, suppressed


CHECK_DEFAULTS = {"alpha-k-anonymity": {"alpha": None, "k": None, "sensitive": None},
                  "alpha-i-k-anonymity": {"k": None, "per": None, "sensitive": None}}


def check(metric, table, **given):
    return metric.compute(None, table, {**CHECK_DEFAULTS[metric.name], **given}, make_context())


# -- every published class satisfies the bound, on real data ----------------------------------


@pytest.mark.parametrize("params", [
    {"k": 2}, {"k": 5}, {"k": 10, "choice": "random"}, {"k": 4, "per": "level", "choice": "first"},
    {"k": 3, "choice": "first"},
], ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_alpha_i_k_gca_classes_satisfy_the_graded_bound_on_adult(adult, params):
    published, suppressed = run(AlphaIKGca(), adult, **params)
    res = check(AlphaIKAnonymity(), published)  # k and per from the claim
    assert res["alpha-i-k-anonymity.holds"] == 1.0, res
    assert res["alpha-i-k-anonymity"] <= 1.0 + 1e-9
    assert res["alpha-i-k-anonymity.smallest_class"] >= params["k"]
    assert res["alpha-i-k-anonymity.k"] == params["k"]
    # the same, counted in numpy: class sizes and each value's share against its level's alpha
    labels = published.classes()
    grading = parse_grading(adult_grading(), where="t")
    occ = published.data.column("occupation").to_pylist()
    values = {v: lv for v, lv in grading.value_levels().items()}
    alpha = grading.alphas()
    sizes = np.bincount(labels)
    assert sizes[sizes > 0].min() >= params["k"]
    key = "level" if params.get("per") == "level" else "value"
    pairs = Counter((c, values[o] if key == "level" else o) for c, o in zip(labels.tolist(), occ))
    for (c, what), count in pairs.items():
        lv = what if key == "level" else values[what]
        assert count <= alpha[lv] * sizes[c] + 1e-9
    # records of the QIs are published exactly as they were
    orig = adult.data.take(pa.array(published.rows()))
    for q in ADULT_QI:
        assert published.data.column(q).equals(orig.column(q))
    # published and suppressed records are the input, record for record
    rows = published.rows().tolist() + suppressed.column(ROW).to_pylist()
    assert sorted(rows) == list(range(adult.num_rows))
    if params.get("per") == "level":
        assert suppressed.num_rows > 0  # level 2 is 39% of Adult, above its alpha of 0.3
    else:
        assert suppressed.num_rows == 0  # per value, Adult's largest occupation (13%) fits every bound


@pytest.mark.parametrize("params", [
    {"k": 2, "alpha": 0.5}, {"k": 4, "alpha": 0.2, "choice": "first"}, {"k": 10, "alpha": 0.35, "choice": "random"},
    {"k": 6, "alpha": 0.6, "choice": "first"},
], ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_alpha_k_gca_classes_satisfy_the_bound_on_adult(adult, params):
    published, _ = run(AlphaKGca(), adult, **params)
    res = check(AlphaKAnonymity(), published)  # alpha and k from the claim
    assert res["alpha-k-anonymity.holds"] == 1.0, res
    assert res["alpha-k-anonymity"] <= params["alpha"] + 1e-9
    assert res["alpha-k-anonymity.alpha"] == params["alpha"]
    assert res["alpha-k-anonymity.smallest_class"] >= params["k"]
    # a stricter alpha than the one the classes were built for is reported as violated
    strict = check(AlphaKAnonymity(), published, alpha=0.1)
    assert strict["alpha-k-anonymity.holds"] == 0.0 and strict["alpha-k-anonymity.violating_classes"] > 0


def test_the_checks_group_by_published_qi_values_without_class_ids():
    t = make_table({"q": [1, 1, 2, 2, 2], "s": ["a", "b", "a", "a", "b"]}, {"q": "continuous"}, "s")
    res = check(AlphaKAnonymity(), t, alpha=0.5, k=2)
    assert res["alpha-k-anonymity"] == pytest.approx(2 / 3)
    assert res["alpha-k-anonymity.classes"] == 2 and res["alpha-k-anonymity.violating_classes"] == 1
    assert res["alpha-k-anonymity.worst_class"] == 1  # dense rank of q = 2
    assert res["alpha-k-anonymity.holds"] == 0.0


# -- Table 8 of seed 002: reproduce the grouping, report the violation -------------------------

TABLE1 = [  # No, Job, Age, Sex, Zipcode, Disease (seed 002, Table 1)
    (1, "clerk", 23, "F", "13010", "Fever"), (2, "accountant", 25, "F", "13050", "Flu"),
    (3, "barker", 30, "M", "13020", "Viral Infection"), (4, "editor", 31, "F", "13040", "Flu"),
    (5, "housewife", 36, "F", "13220", "Fever"), (6, "manager", 39, "M", "13221", "Viral Infection"),
    (7, "dustman", 42, "M", "13226", "HIV"), (8, "wleder", 45, "M", "13228", "Cancer"),
    (9, "prof.", 52, "F", "14850", "Cancer"), (10, "mechanic", 53, "M", "14862", "Fever"),
    (11, "manager", 61, "M", "14802", "HIV"), (12, "prof.", 64, "M", "14800", "Heart Disease"),
]
TABLE8 = [{7, 1, 2}, {8, 5, 3}, {9, 10, 4}, {11, 6, 12}]  # class ids 1..4 of seed 002 Table 8


def disease_grading(alpha1: float) -> dict:
    """Seed 002 Table 4 with the worked example's bounds {alpha_1, 0.35, 0.4, 0.45, 0.5}."""
    return parse_grading({"levels": [
        {"alpha": alpha1, "values": ["HIV", "Cancer", "Syphilis"]},
        {"alpha": 0.35, "values": ["Neurasthenia", "Sclerosis", "Zona"]},
        {"alpha": 0.40, "values": ["Diabetes", "phtisis", "Heart Disease"]},
        {"alpha": 0.45, "values": ["Flu", "Viral Infection", "Anemia"]},
        {"alpha": 0.50, "values": ["Fever", "Cold", "Indigestion"]}]}, where="t").to_json()


def table1(alpha1: float, classes: list[set[int]] | None = None) -> TypedTable:
    cols = list(zip(*TABLE1))
    t = make_table({"job": list(cols[1]), "age": list(cols[2]), "sex": list(cols[3]), "zip": list(cols[4]),
                    "disease": list(cols[5])},
                   {"job": "nominal", "age": "continuous", "sex": "nominal", "zip": "semantic"}, "disease",
                   disease_grading(alpha1))
    if classes is not None:
        cls = [next(i + 1 for i, c in enumerate(classes) if no in c) for no in cols[0]]
        t = t.replace(data=t.data.append_column(CLASS, pa.array(cls, pa.int64())))
    return t


def groups(published: TypedTable) -> list[set[int]]:
    by: dict[int, set[int]] = {}
    for row, c in zip(published.rows().tolist(), published.classes().tolist()):
        by.setdefault(c, set()).add(row + 1)
    return [by[c] for c in sorted(by)]


def test_table8_grouping_violates_the_papers_own_bound():
    """Each class of Table 8 holds one level-1 value in 3 records: 1/3 > alpha_1 = 0.3."""
    res = check(AlphaIKAnonymity(), table1(0.3, TABLE8), k=3)
    assert res["alpha-i-k-anonymity.holds"] == 0.0
    assert res["alpha-i-k-anonymity.violating_classes"] == 4
    assert res["alpha-i-k-anonymity.worst_ratio"] == pytest.approx(1 / 3)
    assert res["alpha-i-k-anonymity.worst_alpha"] == 0.3 and res["alpha-i-k-anonymity.worst_level"] == 1
    assert res["alpha-i-k-anonymity"] == pytest.approx((1 / 3) / 0.3)
    assert res["alpha-i-k-anonymity.worst_class"] == 1
    assert res["alpha-i-k-anonymity.smallest_class"] == 3


def test_gca_reproduces_the_table8_grouping_when_the_bound_admits_it():
    """With alpha_1 = 1/3 (the smallest bound Table 8 meets) and the paper's record choice
    (each bucket's first record), GCA forms exactly Table 8's classes, in its order."""
    published, suppressed = run(AlphaIKGca(), table1(1 / 3), k=3, choice="first")
    assert groups(published) == TABLE8 and suppressed.num_rows == 0
    assert check(AlphaIKAnonymity(), published)["alpha-i-k-anonymity.holds"] == 1.0


def test_gca_with_the_papers_alpha_keeps_the_bound_and_so_differs_from_table8():
    published, suppressed = run(AlphaIKGca(), table1(0.3), k=3, choice="first")
    found = groups(published)
    assert found != TABLE8
    assert found[0] == {7, 1, 2, 12}  # t7's class needs a 4th record: 1/4 <= 0.3
    assert suppressed.num_rows == 0
    assert check(AlphaIKAnonymity(), published)["alpha-i-k-anonymity.holds"] == 1.0


def test_table5_general_alpha_k_grouping_holds():
    """Seed 002 Table 5: a general (0.4, 3)-anonymous grouping."""
    t5 = [{1, 2, 3}, {5, 7, 8}, {4, 6, 9}, {10, 11, 12}]
    res = check(AlphaKAnonymity(), table1(0.3, t5), alpha=0.4, k=3)
    assert res["alpha-k-anonymity.holds"] == 1.0 and res["alpha-k-anonymity"] == pytest.approx(1 / 3)


# -- record choice and leftovers -------------------------------------------------------------


def test_nearest_choice_takes_the_qi_nearest_record_of_the_bucket():
    # a = 30, 70, 71, 72 starts (buckets tie in size; a's first record comes first); bucket b
    # holds 10, 29, 31, 60: 29 and 31 are both nearest to 30, the lower position (29) wins
    ages = [30, 70, 71, 72, 10, 29, 31, 60]
    t = make_table({"age": ages, "s": ["a"] * 4 + ["b"] * 4}, {"age": "continuous"}, "s")
    published, _ = run(AlphaKGca(), t, k=2, alpha=0.5)
    assert groups(published)[0] == {1, 6}
    d = record_distances(encode(t), 0, rows=np.arange(4, 8))
    assert d[1] == d[2] == d.min()


def test_random_choice_is_seeded(adult):
    small = adult.replace(data=adult.data.slice(0, 3000))
    a, _ = run(AlphaIKGca(), small, seed=1, k=4, choice="random")
    b, _ = run(AlphaIKGca(), small, seed=1, k=4, choice="random")
    c, _ = run(AlphaIKGca(), small, seed=2, k=4, choice="random")
    assert np.array_equal(a.classes(), b.classes())
    assert not np.array_equal(a.classes(), c.classes())


def test_leftovers_prefer_classes_without_their_level_then_the_farthest_most_sensitive_level():
    # levels: a = 1, b = 2, c = 3, d = 4; alpha 0.5 each; k = 2
    # greedy: {a, d} and {b, d}; then only c is non-empty (fewer than k buckets), so its 3
    # records are leftovers:
    # c1 -> {a, d} (no level 3, most sensitive level 1 is farther than 2),
    # c2 -> {b, d} (no level 3 there any more beats distance), c3 -> {a, d, c} (farthest again)
    level = np.array([1, 2, 3, 4])
    bucket_of = np.array([0, 1, 2, 2, 2, 3, 3])
    labels, stats = gca_partition(bucket_of, level, np.array([np.nan, .5, .5, .5, .5]), 2, choice="first")
    assert labels.tolist() == [0, 1, 0, 1, 0, 0, 1]
    assert stats == {"classes": 2, "greedy_records": 4, "leftovers_placed": 3, "suppressed": 0,
                     "abandoned_classes": 0}


def test_records_that_fit_nowhere_are_suppressed():
    # a x6, b x2, c x1, k = 2, alpha = 0.5: {a,b} {a,b} {a,c}; the last three a's fit in no class
    labels, stats = gca_partition(np.array([0] * 6 + [1] * 2 + [2]), np.ones(3, dtype=int),
                                  np.array([np.nan, 0.5]), 2, choice="first")
    assert stats["classes"] == 3 and stats["suppressed"] == 3
    assert (labels[:6] < 0).sum() == 3


# -- engine integration: suppression, lossy-join files ------------------------------------------

TINY = "x,s\n" + "".join(f"{x},{s}\n" for x, s in
                         [(1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "a"), (6, "a"), (7, "b"), (8, "b"), (9, "c")])


def tiny_workflow(folder: Path, algo: str = "uniform", extra: str = "", grading: str | None = None) -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "tiny.csv").write_text(TINY)
    sens = f"{{s: {{grading: {grading}}}}}" if grading else "[s]"
    uses = "alpha-k-gca" if algo == "uniform" else "alpha-i-k-gca"
    # 3 of the 9 records fit in no class (uniform): a third, above the default cap of 5 %
    params = "{k: 2, alpha: 0.5, choice: first, max_suppression: 0.34}" if algo == "uniform" else \
        "{k: 2, choice: first, max_suppression: 0.34}"
    text = textwrap.dedent(f"""\
        name: tiny
        seed: 3
        sources:
          tiny: {{path: data/tiny.csv}}
        steps:
          typed:
            uses: typing
            input: tiny
            with: {{quasi: [x], sensitive: {sens}}}
          grouped:
            uses: {uses}
            input: typed
            with: {params}
          published:
            uses: publish
            input: grouped
            with: {{publisher: lossy-join, path: tiny, format: csv}}
        """) + textwrap.indent(textwrap.dedent(extra), "  ")
    path = folder / "wf.yaml"
    path.write_text(text)
    return path


def test_suppressed_and_published_records_are_the_input_record_for_record(cli, tmp_path):
    wf = tiny_workflow(tmp_path)
    db = tmp_path / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    step = next(s for s in out["steps"] if s["step"] == "grouped")
    assert step["rows"] == 6 and any("3 record(s) suppressed" in n for n in step["notes"])
    con = duckdb.connect(str(db), read_only=True)
    source = con.execute('SELECT _row, x, s FROM steps."tiny.typed" ORDER BY _row').fetchall()
    published = con.execute('SELECT _row, x, s FROM steps."tiny.grouped"').fetchall()
    suppressed = con.execute('SELECT _row, x, s FROM steps."tiny.grouped.suppressed"').fetchall()
    assert sorted(published + suppressed) == source
    assert not {r[0] for r in published} & {r[0] for r in suppressed}
    assert [r[2] for r in suppressed] == ["a"] * 3
    qi = pacsv.read_csv(tmp_path / "out" / "tiny-qi.csv")
    sa = pacsv.read_csv(tmp_path / "out" / "tiny-sa.csv")
    assert qi.num_rows == 6 and sum(sa.column("count").to_pylist()) == 6


@pytest.fixture(scope="module")
def adult_run(tmp_path_factory):
    """The shipped gca-adult workflow, run once (k = 4, alpha = 0.5)."""
    from anonflow import registry as plugins
    from anonflow.cli import main

    plugins.set_registry(None)
    folder = tmp_path_factory.mktemp("gca")
    db = folder / "s.duckdb"
    res = CliRunner().invoke(main, ["run", str(WORKFLOWS / "gca-adult.yaml"), "--db", str(db), "--out-dir",
                                    str(folder), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return folder, db, json.loads(res.output)


def test_gca_adult_workflow_reproduces_the_experiment_setup(adult_run):
    folder, db, out = adult_run
    steps = {s["step"]: s for s in out["steps"]}
    assert steps["training"]["rows"] == 30162 and steps["sample"]["rows"] == 10000
    m = out["metrics"]
    assert m["graded-scores.alpha-i-k-anonymity.holds"] == 1.0
    assert m["uniform-scores.alpha-k-anonymity.holds"] == 1.0
    assert 0.5 < m["graded-scores.reconstruction-distance"] < 1.0
    # with alpha = 0.5 and k = 4 every class has 4 distinct values: Dis = 1 - 4 * (1/4)^2
    assert m["uniform-scores.reconstruction-distance"] == pytest.approx(0.75)
    assert [Path(o["path"]).name for o in out["outputs"]] == ["gca-adult-qi.parquet", "gca-adult-sa.parquet"]


def test_gca_adult_generalization_baseline_satisfies_alpha_k_and_loses_more(adult_run):
    """Seed 002's baseline: the lattice node of least (generalized) reconstruction distance
    satisfying (alpha,k) with the same k and alpha, checked independently in SQL."""
    folder, db, out = adult_run
    m = out["metrics"]
    assert m["generalized-scores.alpha-k-anonymity.holds"] == 1.0
    assert m["generalized-scores.alpha-k-anonymity.worst_ratio"] <= 0.5
    assert m["generalized-scores.k-anonymity"] >= 4
    # err(t) = 1 - 1/V over boxes of V original cells: recomputed from the mean V would be
    # looser; the claim is only that GCA reconstructs better than generalization
    assert m["generalized-scores.reconstruction-distance"] > m["uniform-scores.reconstruction-distance"]
    assert m["generalized-scores.reconstruction-distance"] > m["graded-scores.reconstruction-distance"]
    notes = next(s for s in out["steps"] if s["step"] == "generalized")["notes"]
    assert any("1296 nodes (6 x 3 x 4 x 3 x 3 x 2 levels over age, workclass, education, marital-status, "
               "relationship, race)" in n for n in notes)
    assert any("with reconstruction-distance = " in n for n in notes)


def test_suppressed_records_count_as_lost_in_the_reconstruction_distance(tmp_path):
    """per: level suppresses records; the evaluate step tells the metric how many, and
    Dis over all 10,000 records counts each suppressed one as err = 1."""
    from anonflow import registry as plugins
    from anonflow.cli import main

    plugins.set_registry(None)
    res = CliRunner().invoke(main, ["run", str(WORKFLOWS / "gca-adult.yaml"), "--db", str(tmp_path / "s.duckdb"),
                                    "--out-dir", str(tmp_path), "--json", "--set", "graded.per=level",
                                    "--set", "graded.max_suppression=0.3"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    m = json.loads(res.output)["metrics"]
    key = "graded-scores.reconstruction-distance"
    records, suppressed = m[f"{key}.records"], m[f"{key}.suppressed"]
    assert suppressed > 0 and records + suppressed == 10000
    assert m[f"{key}.with_suppressed"] == pytest.approx((m[key] * records + suppressed) / 10000, rel=1e-12)
    assert m[f"{key}.with_suppressed"] > m[key]
    # nothing suppressed, no extra values
    assert "uniform-scores.reconstruction-distance.with_suppressed" not in m


def test_lossy_join_pair_joined_on_class_id_gives_back_each_class(adult_run):
    folder, db, out = adult_run
    qi = pq.read_table(folder / "gca-adult-qi.parquet")
    sa = pq.read_table(folder / "gca-adult-sa.parquet")
    quasi = list(ADULT_QI)
    assert qi.column_names == [*quasi, "class_id"] and "occupation" not in qi.column_names
    assert sa.column_names == ["class_id", "occupation", "count"]
    meta = json.loads(qi.schema.metadata[b"anonflow.lossy-join"])
    assert meta == {"class_column": "class_id", "count_column": "count", "partner": "gca-adult-sa.parquet",
                    "role": "qi", "sensitive": "occupation"}
    con = duckdb.connect(str(db), read_only=True)
    cols = ", ".join(f'"{q}"' for q in quasi)
    grouped = con.sql(f'SELECT _class, {cols}, occupation FROM steps."gca-adult.graded"').to_arrow_table()
    con.close()
    mem = duckdb.connect()
    mem.register("qi", qi)
    mem.register("sa", sa)
    mem.register("grouped", grouped)
    # per class, the QI rows are the class's QI tuples (a multiset) ...
    q1 = mem.execute(f"SELECT class_id, {cols}, count(*) FROM qi GROUP BY ALL ORDER BY ALL").fetchall()
    q2 = mem.execute(f"SELECT _class, {cols}, count(*) FROM grouped GROUP BY ALL ORDER BY ALL").fetchall()
    assert q1 == q2
    # ... the SA counts are the class's sensitive values (a multiset) ...
    s1 = mem.execute("SELECT class_id, occupation, count FROM sa ORDER BY ALL").fetchall()
    s2 = mem.execute("SELECT _class, occupation, count(*) FROM grouped GROUP BY ALL ORDER BY ALL").fetchall()
    assert s1 == s2
    # ... so the join on the class id yields, per class, every (QI, S) combination of the class
    # (|E| x distinct values rows), among them each original record
    joined = mem.execute(f"SELECT class_id, {cols}, occupation FROM qi JOIN sa USING (class_id)").fetchall()
    expected = mem.execute(f"""SELECT g._class, {', '.join(f'g."{q}"' for q in quasi)}, v.occupation
        FROM grouped g JOIN (SELECT DISTINCT _class, occupation FROM grouped) v USING (_class)""").fetchall()
    assert Counter(joined) == Counter(expected)
    originals = mem.execute(f"SELECT _class, {cols}, occupation FROM grouped").fetchall()
    assert not Counter(originals) - Counter(joined)
    # the pair in the store (views of the publish step) is the same
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute('SELECT count(*) FROM steps."gca-adult.published.qi"').fetchall() == [(10000,)]
    assert con.execute('SELECT count(*) FROM steps."gca-adult.published.sa"').fetchall() == [(sa.num_rows,)]


def test_the_check_works_on_the_published_pair_as_on_the_single_table(adult_run):
    folder, db, out = adult_run
    qi = pq.read_table(folder / "gca-adult-qi.parquet")
    sa = pq.read_table(folder / "gca-adult-sa.parquet")
    ctx = make_context()
    grading = parse_grading(adult_grading(), where="t")
    counts = pair_counts_sql(class_column="class_id", sensitive="occupation", count_column="count")
    assert ctx.sql(pair_consistency_sql(), qi=qi, sa=sa).to_pylist() == [{"bad": 0}]
    pair = alpha_report(ctx.sql, counts, {"qi": qi, "sa": sa}, k=4, grading=grading)
    con = duckdb.connect(str(db), read_only=True)
    graded = con.sql('SELECT * FROM steps."gca-adult.graded"').to_arrow_table()
    con.close()
    single = alpha_report(ctx.sql, table_counts_sql(graded.column_names, list(ADULT_QI), "occupation"),
                          {"published": graded}, k=4, grading=grading)
    assert pair == single
    m = out["metrics"]
    assert pair["violating"] == 0
    assert pair["worst_relative"] == pytest.approx(m["graded-scores.alpha-i-k-anonymity"])
    assert pair["classes"] == m["graded-scores.alpha-i-k-anonymity.classes"]
    assert pair["smallest"] == m["graded-scores.alpha-i-k-anonymity.smallest_class"]
    # a tampered SA table: counts no longer match the QI rows, and a value now breaks its bound
    tampered = sa.set_column(2, "count", pa.array([c * 3 if i == 0 else c for i, c in
                                                   enumerate(sa.column("count").to_pylist())], pa.int64()))
    assert ctx.sql(pair_consistency_sql(), qi=qi, sa=tampered).to_pylist()[0]["bad"] == 1
    assert alpha_report(ctx.sql, counts, {"qi": qi, "sa": tampered}, k=4, grading=grading)["violating"] == 1


def test_lossy_join_publishes_mdav_groups(cli, project):
    wf = census_workflow(project)
    text = wf.read_text().replace("quasi: [AFNLWGT, ", "sensitive: [AFNLWGT]\n      quasi: [")
    text = text.replace("{publisher: parquet, path: census.parquet}",
                        "{publisher: lossy-join, qi_path: q.csv, sa_path: s.csv, format: csv}")
    wf.write_text(text)
    db = project / "s.duckdb"
    res = cli("run", wf, "--db", db, "--json")
    assert res.exit_code == 0, res.output
    outputs = json.loads(res.output)["outputs"]
    assert [Path(o["path"]).name for o in outputs] == ["q.csv", "s.csv"]
    qi = pacsv.read_csv(project / "out" / "q.csv")
    sa = pacsv.read_csv(project / "out" / "s.csv")
    assert "AFNLWGT" not in qi.column_names and qi.column_names[-1] == "class_id" and qi.num_rows == 1080
    assert sa.column_names == ["class_id", "AFNLWGT", "count"] and sum(sa.column("count").to_pylist()) == 1080
    assert outputs[1]["rows"] == sa.num_rows
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute('SELECT sum("count") FROM steps."census-test.published.sa"').fetchall() == [(1080,)]


# -- metrics on hand-computed examples ------------------------------------------------------


def test_reconstruction_distance_lossy_join_by_hand():
    # class 0 = {a, a, b}: err(a) = (1 - 2/3)^2 + (1/3)^2 = 2/9, err(b) = (1 - 1/3)^2 + (2/3)^2 = 8/9
    # class 1 = {c, d}: err = (1/2)^2 + (1/2)^2 = 1/2 each; Dis = (2/9 + 2/9 + 8/9 + 1/2 + 1/2) / 5 = 7/15
    cols = {"q": [1, 1, 1, 2, 2], "s": ["a", "a", "b", "c", "d"]}
    t = make_table(cols, {"q": "continuous"}, "s")
    params = {"form": "lossy-join", "sensitive": None}
    by_qi = ReconstructionDistance().compute(None, t, params, make_context())
    assert by_qi["reconstruction-distance"] == pytest.approx(7 / 15)
    assert by_qi["reconstruction-distance.classes"] == 2
    with_ids = t.replace(data=t.data.append_column(CLASS, pa.array([5, 5, 5, 9, 9], pa.int64())))
    assert ReconstructionDistance().compute(None, with_ids, params, make_context())[
        "reconstruction-distance"] == pytest.approx(7 / 15)


def test_reconstruction_distance_generalized_by_hand():
    # age 20..39 with bins of 10 then *, zip 3 codes under 130**: records
    #   t1: age [20-29] (10 values), zip 130** (3 values) -> V = 30, err = 29/30
    #   t2: age 25, zip 13050 (unchanged)               -> V = 1,  err = 0
    #   t3: age *  (20 values),  zip 130**               -> V = 60, err = 59/60
    ages = [str(a) for a in range(20, 40)]
    h_age = Hierarchy.from_levels("age", [ages, ["[20-29]" if int(a) < 30 else "[30-39]" for a in ages],
                                          ["*"] * 20])
    zips = ["13010", "13020", "13050"]
    h_zip = Hierarchy.from_levels("zip", [zips, ["130**"] * 3, ["*"] * 3])
    quasi = {"age": "continuous", "zip": "semantic"}
    original = make_table({"age": [23, 25, 30], "zip": ["13010", "13050", "13020"], "s": ["x", "y", "z"]},
                          quasi, "s")
    anonymized = make_table({"age": ["[20-29]", "25", "*"], "zip": ["130**", "13050", "130**"],
                             "s": ["x", "y", "z"]}, quasi, "s").replace(hierarchies={"age": h_age, "zip": h_zip})
    params = {"form": "generalized", "sensitive": None}
    res = ReconstructionDistance().compute(original, anonymized, params, make_context())
    assert res["reconstruction-distance"] == pytest.approx((29 / 30 + 0 + 59 / 60) / 3)
    assert res["reconstruction-distance.mean_cells"] == pytest.approx((30 + 1 + 60) / 3)
    bad = anonymized.replace(data=anonymized.data.set_column(1, "age", pa.array(["[30-39]", "25", "*"])))
    with pytest.raises(InputError, match="column 'age' publishes '\\[30-39\\]' for the original value 23"):
        ReconstructionDistance().compute(original, bad, params, make_context())
    with pytest.raises(InputError, match="give the evaluate step two inputs"):
        ReconstructionDistance().compute(None, anonymized, params, make_context())


def test_sensitivity_distance_averages_the_classes_with_level_1_or_2():
    # classes by level: {1,2,3,3} (Ds = 6.25/6), {3,4,5,5} (6.95/6, no level 1 or 2), {2,5} (3.0)
    values = {1: "Protective-serv", 2: "Adm-clerical", 3: "Tech-support", 4: "Sales", 5: "Other-service"}
    levels = [[1, 2, 3, 3], [3, 4, 5, 5], [2, 5]]
    s = [values[lv] for cls in levels for lv in cls]
    cls = [i for i, c in enumerate(levels) for _ in c]
    t = make_table({"q": list(range(len(s))), "occupation": s}, {"q": "continuous"}, "occupation", adult_grading())
    t = t.replace(data=t.data.append_column(CLASS, pa.array(cls, pa.int64())))
    m = SensitivityDistance()
    res = m.compute(None, t, {"normalized": False, "levels": 2, "sensitive": None}, make_context())
    assert res["sensitivity-distance"] == pytest.approx((6.25 / 6 + 3.0) / 2)
    assert res["sensitivity-distance.classes"] == 2
    assert res["sensitivity-distance.all_classes"] == pytest.approx((6.25 / 6 + 6.95 / 6 + 3.0) / 3)
    norm = m.compute(None, t, {"normalized": True, "levels": 2, "sensitive": None}, make_context())
    assert norm["sensitivity-distance"] == pytest.approx((6.25 / 6 + 3.0) / 2 / 4)


# -- bad input: one line, exit code 2 ------------------------------------------------------------

BAD = [
    ("alpha 0", "uniform", None, lambda t: t.replace("alpha: 0.5", "alpha: 0"),
     "step 'grouped': parameter 'alpha': expected a number in (0, 1], got 0"),
    ("alpha above 1", "uniform", None, lambda t: t.replace("alpha: 0.5", "alpha: 1.5"),
     "parameter 'alpha': expected a number in (0, 1], got 1.5"),
    ("alpha too small for the values", "uniform", None, lambda t: t.replace("alpha: 0.5", "alpha: 0.25"),
     "parameter 'alpha' = 0.25 needs at least 4 different values of 's' in each class, but 's' has only 3"),
    ("k larger than the table", "uniform", None, lambda t: t.replace("k: 2", "k: 50"),
     "step 'grouped': parameter 'k' = 50 is larger than the table (9 records)"),
    ("k above the distinct values", "uniform", None, lambda t: t.replace("k: 2", "k: 4"),
     "parameter 'k' = 4 must be at most 3"),
    ("grading leaves a value unassigned", "graded", "{levels: [{alpha: 0.5, values: [a, b]}]}", lambda t: t,
     "step 'typed': the grading of 's' leaves the value 'c' unassigned"),
    ("no grading", "graded", None, lambda t: t,
     "alpha-i-k-gca needs a sensitivity grading of 's'; declare it in the typing step"),
]


@pytest.mark.parametrize("label, algo, grading, breaker, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_with_exit_code_2(cli, tmp_path, label, algo, grading, breaker, fragment):
    wf = tiny_workflow(tmp_path, algo, grading=grading)
    wf.write_text(breaker(wf.read_text()))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert fragment in res.output
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_lossy_join_needs_paths(cli, tmp_path):
    wf = tiny_workflow(tmp_path)
    wf.write_text(wf.read_text().replace("path: tiny, ", ""))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and "lossy-join needs either 'path'" in res.output


@pytest.mark.parametrize("metric, params", [
    (AlphaKAnonymity(), {"alpha": 0.4, "k": 3}), (AlphaKAnonymity(), {"alpha": 0.6, "k": 5}),
    (AlphaIKAnonymity(), {"k": 3, "per": "value"}), (AlphaIKAnonymity(), {"k": 2, "per": "level"}),
], ids=["alpha-k 0.4", "alpha-k 0.6", "alpha-i-k value", "alpha-i-k level"])
def test_partition_holds_agrees_with_the_sql_check(adult, metric, params):
    """The vectorized per-class check a lattice search uses gives the SQL check's verdicts."""
    from anonflow.api import Partition

    small = adult.replace(data=adult.data.slice(0, 3000))
    labels = np.random.default_rng(5).integers(0, 600, small.num_rows)
    labels = np.unique(labels, return_inverse=True)[1]
    grouped = small.replace(data=small.data.append_column(CLASS, pa.array(labels, pa.int64())))
    full = {**CHECK_DEFAULTS[metric.name], **params}
    res = metric.compute(None, grouped, full, make_context())
    holds = metric.partition_holds(Partition(labels, np.bincount(labels), small), full)
    assert holds.shape == (labels.max() + 1,) and holds.dtype == bool
    assert int((~holds).sum()) == res[f"{metric.name}.violating_classes"] > 0
    assert holds.any()
