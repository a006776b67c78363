"""The lattice algorithm (SPEC section 6): optimal full-domain generalization for any monotone
privacy model, its search (every node classified exactly as an exhaustive check would),
its choice (no satisfying node has less loss), its output (satisfies the model, checked in
SQL), and its errors."""

import itertools
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anonflow import registry as plugins
from anonflow.api import CLASS, InputError, Metric, Param, Partition, hookimpl, sql_ident
from anonflow.params import validate_params
from anonflow.testing import make_context, typed_table
from anonflow_std.generalization import lattice as lattice_module
from anonflow_std.generalization.hierarchies import ArxFile
from anonflow_std.generalization.lattice import Lattice
from anonflow_std.generalization.lattice_search import BOUND_MARGIN, Search, Space, Verdict, _group
from anonflow_std.generalization.lattice_search import Scorer as _Scorer
from anonflow_std.privacy.kanonymity import KAnonymity
from anonflow_std.utility.reconstruction import ReconstructionDistance

from tests.support import data
from tests.support.helpers import DATA, write

ARX = DATA / "arx"


# -- fixtures -----------------------------------------------------------------------------


def arx_hierarchy(column):
    return ArxFile().build(column, pa.array([]), {"file": str(ARX / f"adult_hierarchy_{column}.csv"),
                                                  "delimiter": ";"}, make_context())


def adult(n=1500, quasi=("age", "sex", "race", "marital-status"), seed=1):
    """A sample of ARX's Adult with ARX's hierarchies on ``quasi``; S = occupation, label =
    salary-class."""
    whole = data.arx_adult()
    rows = np.sort(np.random.default_rng(seed).choice(whole.num_rows, n, replace=False))
    raw = whole.take(pa.array(rows))
    cols = {c: raw.column(c).to_pylist() for c in (*quasi, "occupation", "salary-class")}
    t = typed_table(cols, quasi={q: "continuous" if q == "age" else "nominal" for q in quasi},
                    sensitive={"occupation": "nominal"}, label={"salary-class": "nominal"})
    return t.replace(hierarchies={q: arx_hierarchy(q) for q in quasi})


def lattice():
    """The lattice of the process's registry (the one :func:`use` sets): it looks its privacy
    models and utility metrics up in the registry it is registered in."""
    return plugins.get_registry().get("algorithm", "lattice").obj


def lattice_params(**given):
    return validate_params(Lattice.params, given)


def run_lattice(table, **given):
    ctx = make_context()
    params = lattice_params(**given)
    lattice().check(params, table=table)
    out = lattice().run(table, params, ctx)
    return out, ctx


def published(out):
    """What the engine publishes: records with a class (the runner splits off the rest)."""
    return out.replace(data=out.data.filter(pc.is_valid(out.data.column(CLASS))))


def use(*objs):
    class Provider:
        @hookimpl
        def anonflow_register_metrics(self, register):
            for m in objs:
                register(m)

    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="lattice-test")
    plugins.set_registry(plugins.Registry(pm, dists))


class DistinctL(Metric):
    """Distinct l-diversity, as a third party would write it: SQL check + partition_holds."""

    name = "test.distinct-l"
    version = "0.0.1"
    category = "privacy"
    requires_original = False
    params = (Param("l", "int", default=None, nullable=True, min=1),)
    monotone = True
    monotone_with_suppression = True

    def partition_holds(self, partition, params):
        return partition.distinct(partition.table.typing.sensitive[0]) >= params["l"]

    def compute(self, original, anonymized, params, ctx):
        l = params["l"] or anonymized.claims[self.name]["l"]
        data = anonymized.data.filter(pc.is_valid(anonymized.data.column(CLASS)))
        group = ", ".join(sql_ident(q) for q in anonymized.typing.quasi)
        s = sql_ident(anonymized.typing.sensitive[0])
        worst = ctx.sql(f"SELECT min(d) AS d FROM (SELECT count(DISTINCT {s}) AS d FROM t GROUP BY {group})",
                        t=data).to_pylist()[0]["d"]
        return {self.name: float(worst), f"{self.name}.holds": float(worst >= l)}


class MaxShare(Metric):
    """(alpha)-style bound on the most frequent sensitive value: monotone, but not once
    records may be suppressed."""

    name = "test.max-share"
    version = "0.0.1"
    category = "privacy"
    requires_original = False
    params = (Param("alpha", "float", default=None, nullable=True),)
    monotone = True
    monotone_with_suppression = False

    def partition_holds(self, partition, params):
        counts = partition.counts(partition.table.typing.sensitive[0])
        return counts.max(axis=1) <= params["alpha"] * partition.sizes + 1e-9

    def compute(self, original, anonymized, params, ctx):
        return {self.name: 0.0}


# -- grouping and roll-up -------------------------------------------------------------------


def test_group_numbers_classes_in_code_tuple_order_whatever_the_path():
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, c, 500) for c in (3, 7, 2)]
    inverse, reps = _group(cols, [3, 7, 2])
    tuples = sorted(set(zip(*[c.tolist() for c in cols])))
    assert list(zip(*[r.tolist() for r in reps])) == tuples
    assert [tuples[i] for i in inverse] == list(zip(*[c.tolist() for c in cols]))
    # a key space too large for int64 is densified on the way: same numbering
    big = [rng.integers(0, 1 << 40, 300), rng.integers(0, 1 << 40, 300)]
    inv2, reps2 = _group(big, [1 << 40, 1 << 40])
    order = sorted(set(zip(big[0].tolist(), big[1].tolist())))
    assert list(zip(reps2[0].tolist(), reps2[1].tolist())) == order


def test_rolled_up_partitions_equal_partitions_from_the_bottom():
    t = adult(800)
    sp = Space(t, t.typing.quasi)
    rng = np.random.default_rng(3)
    nodes = [tuple(int(rng.integers(0, h + 1)) for h in sp.heights) for _ in range(40)]
    for levels in nodes:
        part = sp.partition(levels)
        gen = [t.hierarchies[q].generalize(t.data.column(q), lv) for q, lv in zip(t.typing.quasi, levels)]
        keys = list(zip(*[g.to_pylist() for g in gen]))
        ids = sp.classes(part)
        # same records together, different published values apart
        assert len(set(keys)) == len(part.sizes)
        assert len(set(zip(keys, ids.tolist()))) == len(part.sizes)
        assert np.array_equal(np.bincount(ids), part.sizes)


def test_partition_helpers_count_sensitive_values_per_class():
    t = typed_table({"s": ["b", "a", "b", "c", "a"]}, sensitive={"s": "nominal"})
    p = Partition(np.array([0, 0, 1, 1, 1]), np.array([2, 3]), t)
    assert p.codes("s")[1] == ["a", "b", "c"]
    assert p.counts("s").tolist() == [[1, 1, 0], [1, 1, 1]]
    assert p.distinct("s").tolist() == [2, 3]
    lazy = Partition(lambda: np.array([0, 1]), np.array([1, 1]), t.replace(data=t.data.slice(0, 2)))
    assert not lazy.classes_used
    assert lazy.distinct("s").tolist() == [1, 1] and lazy.classes_used


# -- the search ---------------------------------------------------------------------------


@pytest.mark.parametrize("k, suppression", [(2, 0.0), (5, 0.0), (10, 0.0), (5, 0.02), (20, 0.05)])
def test_search_classifies_every_node_as_an_exhaustive_check_does(k, suppression):
    t = adult(1500, quasi=("age", "sex", "race", "marital-status", "education"))
    sp = Space(t, t.typing.quasi)
    limit = int(suppression * sp.n)

    def check(levels):
        part = sp.partition(levels)
        failing = int(part.sizes[part.sizes < k].sum())
        return Verdict(failing <= limit, failing, len(part.sizes))

    flash = Search(sp, check, monotone=True)
    flash.run()
    full = Search(sp, check, monotone=False)
    full.run()
    assert np.array_equal(flash.status, full.status)
    assert len(full.verdicts) == sp.size == 5 * 2 * 2 * 3 * 4
    assert len(flash.verdicts) < sp.size
    # minimal nodes: satisfying, and no direct specialization satisfies
    sat = full.status == 1
    for idx in np.flatnonzero(flash.minimal().reshape(-1)):
        lv = np.array(flash.levels(int(idx)))
        assert sat[tuple(lv)]
        for i in range(sp.d):
            if lv[i]:
                below = lv.copy()
                below[i] -= 1
                assert not sat[tuple(below)]


@pytest.mark.parametrize("model, mparams, suppression, utility", [
    ("k-anonymity", {"k": 5}, 0.02, "loss"), ("k-anonymity", {"k": 10}, 0.05, "entropy-loss"),
    ("k-anonymity", {"k": 3}, 0.01, "generalization-rl"), ("l-diversity", {"l": 3}, 0.02, "loss"),
    ("l-diversity", {"l": 2}, 0.05, "mi-loss"),
])
def test_the_loss_bound_excludes_only_nodes_that_cannot_be_the_optimum(model, mparams, suppression, utility):
    """With suppression, the search given each node's loss without suppression (a lower bound
    of its loss) classifies every node it does not exclude as an exhaustive check does,
    excludes only nodes whose bound is past the best exact loss it found (plus the margin),
    never a satisfying node that could beat or tie the optimum -- and checks fewer nodes than
    the search without the bound."""
    from anonflow.registry import get_registry

    t = adult(1500, quasi=("age", "sex", "race", "marital-status", "education"))
    sp = Space(t, t.typing.quasi)
    limit = int(suppression * sp.n)
    reg = get_registry()
    privacy = reg.get("metric", model).obj
    loss = reg.get("metric", utility).obj
    scorer = _Scorer(sp, loss.model(t, validate_params(loss.params, {})))
    assert scorer.lower
    cache = {}

    def check(levels):
        part = sp.partition(levels)
        partition = Partition(lambda: sp.classes(part), part.sizes, t, cache)
        ok = privacy.partition_holds(partition, mparams)
        if partition.classes_used:
            sp.need_classes()
        failing = int(part.sizes[~ok].sum())
        return Verdict(failing <= limit, failing, len(part.sizes), scorer.value(part, ok) if failing <= limit else None)

    full = Search(sp, check, monotone=False)
    full.run()
    values = {i: v.value for i, v in full.verdicts.items() if v.ok}
    best = min(values.values())
    assert all(scorer.bound[i] <= v for i, v in values.items())  # a lower bound
    # ... that grows along generalization (ARX's hierarchies nest): an excluded node's
    # generalizations are excluded too
    grid = scorer.bound.reshape(sp.shape)
    assert all(np.all(np.diff(grid, axis=i) >= -1e-15) for i in range(sp.d))
    flash = Search(sp, check, monotone=True)
    flash.run()
    pruned = Search(sp, check, monotone=True, bound=scorer.bound)
    pruned.run()
    st = pruned.flat
    kept = st != 2
    assert np.array_equal(st[kept], full.flat[kept]) and not kept.all()
    assert pruned.best == min(v.value for v in pruned.verdicts.values() if v.ok) >= best
    assert pruned.cut == pruned.best + BOUND_MARGIN and np.all(scorer.bound[~kept] >= pruned.cut)
    assert all(st[i] == 1 for i, v in values.items() if v < best + 1e-9)
    assert len(pruned.verdicts) < len(flash.verdicts)
    # a model checked node by node (not monotone): in order of the bound, until it excludes the rest
    linear = Search(sp, check, monotone=False, bound=scorer.bound)
    linear.run()
    kept = linear.flat != 2
    assert np.array_equal(linear.flat[kept], full.flat[kept]) and len(linear.verdicts) == kept.sum() < sp.size
    assert np.all(scorer.bound[~kept] >= linear.cut) and linear.best == best


def test_a_loss_whose_bound_is_no_lower_bound_is_not_pruned():
    """A third party's hierarchy loss with widths above 1: a suppressed record (width 1) may
    then lose less than it would published, so the loss without suppression bounds nothing,
    and the search classifies every node."""
    from anonflow_std.common.hierarchy_levels import HierarchyLoss, iyengar_widths

    class WideLoss(HierarchyLoss):
        name = "test.wide-loss"
        version = "0.0.1"

        def widths(self, lv, attr):
            return [2.0 * w for w in iyengar_widths(lv, attr)]

        def weights(self, table, quasi, levels, params):
            return np.full(len(quasi), 1.0 / len(quasi))

    use(WideLoss())
    t = adult(1000)
    _, ctx = run_lattice(t, model_params={"k": 5}, suppression=0.02, utility="test.wide-loss")
    notes = " ".join(ctx.notes)
    assert "'test.wide-loss' has a weight below 0 or a width above 1" in notes and "by the loss bound" not in notes
    _, ctx = run_lattice(t, model_params={"k": 5}, suppression=0.02, utility="loss")
    assert "by the loss bound" in " ".join(ctx.notes)


def exhaustive(table, k, suppression, utility, given=None):
    """Independent optimum: every node generalized with Hierarchy.generalize (Arrow), classes
    counted in SQL, loss by the metric plugin; suppressed records count as loss 1."""
    from anonflow.registry import get_registry

    metric = get_registry().get("metric", utility).obj
    mparams = validate_params(metric.params, given if given is not None else
                              ({"label": None} if utility == "mi-loss" else {}))
    quasi = table.typing.quasi
    hs = [table.hierarchies[q] for q in quasi]
    ctx = make_context()
    n = table.num_rows
    best = np.inf
    for levels in itertools.product(*[range(h.height + 1) for h in hs]):
        data = table.data
        for q, h, lv in zip(quasi, hs, levels):
            data = data.set_column(data.column_names.index(q), q, h.generalize(data.column(q), lv))
        group = ", ".join(sql_ident(q) for q in quasi)
        sizes = ctx.sql(f"SELECT {group}, count(*) OVER (PARTITION BY {group}) AS n FROM t ORDER BY _row",
                        t=data).column("n").to_numpy()
        keep = sizes >= k
        if (~keep).sum() > int(suppression * n):
            continue
        anon = table.replace(data=data.filter(pa.array(keep)))
        orig = table.replace(data=table.data.filter(pa.array(keep)))
        value = metric.compute(orig, anon, mparams, ctx)[utility]
        best = min(best, (keep.sum() * value + (~keep).sum()) / n)
    return best


@pytest.mark.parametrize("utility, k, suppression", [
    ("loss", 5, 0.0), ("entropy-loss", 10, 0.0), ("mi-loss", 5, 0.0), ("generalization-rl", 3, 0.0),
    ("loss", 10, 0.03), ("mi-loss", 5, 0.01),
])
def test_no_satisfying_node_has_less_loss_than_the_chosen_one(utility, k, suppression):
    t = adult(1200)
    out, ctx = run_lattice(t, model="k-anonymity", model_params={"k": k}, suppression=suppression, utility=utility)
    pub = published(out)
    n_supp = t.num_rows - pub.num_rows
    assert n_supp <= int(suppression * t.num_rows)
    from anonflow.registry import get_registry

    metric = get_registry().get("metric", utility).obj
    orig = t.replace(data=t.data.filter(pc.is_in(t.data.column("_row"), value_set=pub.data.column("_row"))))
    value = metric.compute(orig, pub, {"label": None} if utility == "mi-loss" else {}, ctx)[utility]
    chosen = (pub.num_rows * value + n_supp) / t.num_rows
    assert chosen == pytest.approx(exhaustive(t, k, suppression, utility), abs=1e-12)
    assert any(f"with {utility} = " in note for note in ctx.notes)


def test_any_metric_with_suppression_is_optimal_over_every_satisfying_node():
    """reconstruction-distance (generalized form) counts suppressed records as err = 1
    (.with_suppressed); with candidates: satisfying the lattice finds the exhaustive optimum."""
    t = adult(800, quasi=("age", "sex", "race", "education"))
    given = {"form": "generalized"}
    best = exhaustive(t, 5, 0.05, "reconstruction-distance", given)
    values = {}
    for candidates in ("satisfying", "minimal"):
        out, ctx = run_lattice(t, model_params={"k": 5}, suppression=0.05, utility="reconstruction-distance",
                               utility_params=given, candidates=candidates)
        pub = published(out)
        orig = t.replace(data=t.data.filter(pc.is_in(t.data.column("_row"), value_set=pub.data.column("_row"))))
        ctx.suppressed = t.num_rows - pub.num_rows
        res = ReconstructionDistance().compute(orig, pub, validate_params(ReconstructionDistance.params, given), ctx)
        values[candidates] = res.get("reconstruction-distance.with_suppressed", res["reconstruction-distance"])
        assert f"reconstruction-distance = {values[candidates]:.6g}" in " ".join(ctx.notes)
    assert values["satisfying"] == pytest.approx(best, abs=1e-12)
    assert values["minimal"] >= values["satisfying"] - 1e-12


def test_the_output_satisfies_the_model_checked_in_sql():
    t = adult(1500)
    out, ctx = run_lattice(t, model="k-anonymity", model_params={"k": 7}, suppression=0.02)
    pub = published(out)
    assert out.claims == {"k-anonymity": {"k": 7}}
    check = KAnonymity().compute(None, pub, validate_params(KAnonymity.params, {}), ctx)
    assert check["k-anonymity.holds"] == 1.0 and check["k-anonymity"] >= 7
    # QIs are hierarchy labels (text), hierarchies are kept, class ids are dense
    assert all(pa.types.is_string(pub.data.column(q).type) for q in t.typing.quasi)
    assert set(out.hierarchies) == set(t.hierarchies)
    ids = pub.data.column(CLASS).to_numpy()
    assert set(ids.tolist()) == set(range(ids.max() + 1))
    assert check["k-anonymity.classes"] == ids.max() + 1


MODELS = [("k-anonymity", {"k": 5}), ("l-diversity", {"l": 3}), ("p-sensitive-k-anonymity", {"k": 4, "p": 3}),
          ("alpha-k-anonymity", {"alpha": 0.5, "k": 3}), ("alpha-i-k-anonymity", {"k": 3})]


def graded(table):
    """``table`` with seed 002's occupation grading on its sensitive attribute."""
    from anonflow.grading import load_grading
    from anonflow.schema import Attribute, Typing

    grading = load_grading("gradings/adult-occupation.yaml", DATA, where="test")
    attrs = tuple(Attribute(a.name, a.role, a.type, options={**a.options, "grading": grading})
                  if a.name == "occupation" else a for a in table.typing.attributes)
    return table.replace(typing=Typing(attrs))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), suppression=st.sampled_from([0.0, 0.02]))
@pytest.mark.parametrize("model, mparams", MODELS, ids=[m for m, _ in MODELS])
def test_every_output_satisfies_the_model_it_claims_checked_in_sql(model, mparams, seed, suppression):
    """Property: on random samples of real Adult, the lattice's published records satisfy the
    model by the model's own SQL check (not partition_holds), each class is one published QI
    tuple, and no record is lost: published + suppressed = input, suppressed within the limit."""
    from anonflow.registry import get_registry

    t = graded(adult(600, seed=seed))
    try:
        out, ctx = run_lattice(t, model=model, model_params=mparams, suppression=suppression)
    except InputError as exc:  # a sample no node can protect is refused, naming the closest node
        assert "the least violating node" in str(exc)
        return
    assert sorted(out.data.column("_row").to_pylist()) == list(range(t.num_rows))
    pub = published(out)
    assert t.num_rows - pub.num_rows <= int(suppression * t.num_rows + 1e-9)
    metric = get_registry().get("metric", model).obj
    res = metric.compute(t, pub, validate_params(metric.params, mparams), ctx)
    assert res[f"{model}.holds"] == 1.0, res
    quasi = ", ".join(sql_ident(q) for q in t.typing.quasi)
    per_class = ctx.sql(f"SELECT _class, count(DISTINCT ({quasi})) AS n FROM t GROUP BY _class", t=pub.data)
    assert set(per_class.column("n").to_pylist()) <= {1}
    tuples = ctx.sql(f"SELECT count(*) AS n FROM (SELECT DISTINCT {quasi} FROM t)", t=pub.data)
    assert tuples.column("n")[0].as_py() == per_class.num_rows


def test_a_third_party_model_with_sensitive_values_drives_the_search():
    use(DistinctL())
    t = adult(1500)
    out, ctx = run_lattice(t, model="test.distinct-l", model_params={"l": 4}, suppression=0.01)
    pub = published(out)
    assert DistinctL().compute(None, pub, {"l": None}, ctx)["test.distinct-l.holds"] == 1.0
    assert out.claims == {"test.distinct-l": {"l": 4}}
    note = next(n for n in ctx.notes if "checked" in n)
    assert "pruned" in note


def test_the_lattice_looks_its_models_up_in_the_registry_it_is_registered_in():
    """A registry built beside the process's one, with a third party's model: its lattice
    searches that model (check, references and run), while the process registry's lattice
    does not know it. No lookup of a process-wide registry decides which models exist."""

    class Provider:
        @hookimpl
        def anonflow_register_metrics(self, register):
            register(DistinctL())

    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="lattice-registry-test")
    registry = plugins.Registry(pm, dists)
    lattice = registry.get("algorithm", "lattice").obj
    assert lattice.registry is registry
    t = adult(300)
    params = lattice_params(model="test.distinct-l", model_params={"l": 2})
    lattice.check(params, table=t)
    out = lattice.run(t, params, make_context())
    assert out.claims == {"test.distinct-l": {"l": 2}}
    process_lattice = plugins.get_registry().get("algorithm", "lattice").obj
    with pytest.raises(InputError, match="unknown privacy model 'test.distinct-l'"):
        process_lattice.check(params, table=t)


def test_a_model_not_monotone_under_suppression_is_checked_on_every_node(monkeypatch):
    use(MaxShare())
    t = adult(1000)
    # the loss bound still excludes nodes (it needs no monotone model): each one it does not
    # exclude is checked, in order of the bound; without it, every node -- the same choice
    out, ctx = run_lattice(t, model="test.max-share", model_params={"alpha": 0.6}, suppression=0.05)
    note = next(n for n in ctx.notes if "not monotone" in n)
    checked = int(re.search(r"did not exclude was checked \((\d+) of 60\)", note).group(1))
    assert any(f"checked {checked}, pruned 0 by predictive tagging and {60 - checked} by the loss bound" in n
               for n in ctx.notes)
    monkeypatch.setattr(lattice_module, "PRUNE", False)
    out_all, ctx_all = run_lattice(t, model="test.max-share", model_params={"alpha": 0.6}, suppression=0.05)
    assert any("every one of the 60 nodes was checked" in n for n in ctx_all.notes)
    chosen = [re.sub(r"\(\d+ node\(s\) scored\)", "", next(n for n in c.notes if "chosen node" in n))
              for c in (ctx, ctx_all)]
    assert chosen[0] == chosen[1] and checked < 60
    monkeypatch.undo()
    pub = published(out)
    counts = ctx.sql('SELECT max(c * 1.0 / n) AS r FROM (SELECT count(*) AS c, sum(count(*)) OVER (PARTITION BY '
                     '_class) AS n FROM t GROUP BY _class, occupation)', t=pub.data).to_pylist()[0]["r"]
    assert counts <= 0.6
    # without suppression it is monotone: the search prunes and finds the same classification
    out0, ctx0 = run_lattice(t, model="test.max-share", model_params={"alpha": 0.6})
    assert not any("every one" in n for n in ctx0.notes)


class Discernibility(Metric):
    name = "test.discernibility"
    version = "0.0.1"
    category = "utility"
    requires_original = False
    calls = 0

    def compute(self, original, anonymized, params, ctx):
        Discernibility.calls += 1
        sizes = np.bincount(anonymized.data.column(CLASS).to_numpy())
        return {self.name: float((sizes.astype(float) ** 2).sum())}


def test_any_metric_can_choose_among_the_minimal_nodes():
    use(Discernibility())
    t = adult(1000)
    Discernibility.calls = 0
    out, ctx = run_lattice(t, model_params={"k": 5}, utility="test.discernibility")
    note = next(n for n in ctx.notes if "minimal" in n)
    minimal = int(note.split(" of them minimal")[0].rsplit(", ", 1)[1])
    assert Discernibility.calls == minimal
    sizes = np.bincount(out.data.column(CLASS).to_numpy())
    chosen = float((sizes.astype(float) ** 2).sum())
    assert f"test.discernibility = {chosen:.6g}" in " ".join(ctx.notes)


def test_progress_counts_every_node_of_the_lattice_once():
    t = adult(1000)
    seen = []

    def progress(total, label=""):
        seen.append(("total", total, label))
        return lambda n=1: seen.append(("advance", n))

    for given in ({"model_params": {"k": 5}}, {"model_params": {"k": 5}, "suppression": 0.02}):
        seen.clear()
        ctx = make_context()
        ctx.progress = progress
        params = lattice_params(**given)
        lattice().run(t, params, ctx)
        size = int(next(n for n in ctx.notes if " nodes (" in n).split("lattice: ")[1].split(" nodes")[0])
        assert seen[0] == ("total", size, "lattice nodes")
        steps = [n for kind, n, *_ in seen[1:]]
        assert sum(steps) == size and all(n >= 0 for n in steps)


# -- errors ---------------------------------------------------------------------------------


def test_a_quasi_identifier_without_hierarchy_is_named():
    t = adult(300)
    t = t.replace(hierarchies={q: h for q, h in t.hierarchies.items() if q != "race"})
    with pytest.raises(InputError, match=r"quasi-identifier 'race' has no generalization hierarchy; add a hierarchy "
                                         r"step"):
        run_lattice(t, model_params={"k": 2})


def test_no_satisfying_node_names_the_least_violating_one():
    t = adult(300)
    with pytest.raises(InputError) as err:
        run_lattice(t, model_params={"k": 301})
    msg = str(err.value)
    assert "no node satisfies k-anonymity (k=301) with no record suppressed: k = 301 is larger than the number " \
           "of records (300)" in msg
    assert "least violating node [age=4, sex=1, race=1, marital-status=2] leaves 300 of 300 records" in msg
    use(DistinctL())
    with pytest.raises(InputError, match=r"no node satisfies test.distinct-l \(l=15\) with at most 0.1 of the "
                                         r"records \(30\) suppressed: l = 15, but 'occupation' has only 12 distinct "
                                         r"value\(s\) in the whole table; the least violating node \[age=4, sex=1, "
                                         r"race=1, marital-status=2\] leaves 300 of 300 records in failing classes; "
                                         r"no suppression allowance can help"):
        run_lattice(t, model="test.distinct-l", model_params={"l": 15}, suppression=0.1)


@pytest.mark.parametrize("given, fragment", [
    ({"model": "k-anonimity"}, "unknown privacy model 'k-anonimity'"),
    ({"model": "sse-il"}, "is not a privacy check the lattice can search"),
    ({"model_params": {"kk": 2}}, "model_params of 'k-anonymity': unknown parameter 'kk' (did you mean 'k'?)"),
    ({"model_params": {}}, "k-anonymity needs k"),
    ({"utility": "nothere"}, "unknown utility metric 'nothere'"),
])
def test_bad_parameters(given, fragment):
    t = adult(200)
    with pytest.raises(InputError) as err:
        run_lattice(t, **{"model_params": {"k": 2}, **given})
    assert fragment in str(err.value)


def test_mi_loss_needs_a_label_that_varies():
    t = adult(300)
    no_label = t.replace(typing=t.typing.replace(
        a if a.name != "salary-class" else type(a)(a.name, "insensitive") for a in t.typing.attributes))
    with pytest.raises(InputError, match="mi-loss needs a class label: name it under 'label'"):
        run_lattice(no_label, model_params={"k": 2}, utility="mi-loss")
    const = t.replace(data=t.data.set_column(t.data.column_names.index("salary-class"), "salary-class",
                                             pa.array(["<=50K"] * t.num_rows)))
    with pytest.raises(InputError, match="label column 'salary-class' is constant"):
        run_lattice(const, model_params={"k": 2}, utility="mi-loss")
    with pytest.raises(InputError, match="label column 'income' is not in the table"):
        run_lattice(t, model_params={"k": 2}, utility="mi-loss", utility_params={"label": "income"})


# -- workflows --------------------------------------------------------------------------------


def lattice_workflow(folder, hier, lattice="{model: k-anonymity, model_params: {k: 5}}", n=2000,
                     metrics="[k-anonymity, loss, mi-loss]"):
    """A workflow on a sample of ARX's Adult; ``hier`` maps column -> hierarchy spec (YAML)."""
    lines = "\n".join(f"      {c}: {spec}" for c, spec in hier.items())
    path = folder / "wf.yaml"
    path.write_text(f"""name: lattice-test
seed: 3
sources:
  adult: {{path: {ARX / 'adult.csv'}, delimiter: ";"}}
steps:
  sample:
    uses: sample
    input: adult
    with: {{n: {n}}}
  typed:
    uses: typing
    input: sample
    with: {{quasi: {{age: continuous, sex: nominal, race: nominal, education: nominal}},
            sensitive: [occupation], label: [salary-class], others: drop}}
  hier:
    uses: hierarchy
    input: typed
    with:
{lines}
  anon:
    uses: lattice
    input: hier
    with: {lattice}
  scores:
    uses: evaluate
    input: [hier, anon]
    with: {{metrics: {metrics}}}
  out:
    uses: publish
    input: anon
    with: {{publisher: csv, path: anon.csv}}
""")
    return path


HIER = {c: f"{{arx: {ARX / f'adult_hierarchy_{c}.csv'}}}" for c in ("sex", "race", "education")}
AGE = {"age": "{interval: {widths: [5, 10, 20], anchor: 0}}"}


def test_workflow_publishes_generalized_values_and_reports_the_search(cli, tmp_path):
    wf = lattice_workflow(tmp_path, {**AGE, **HIER}, lattice="{model_params: {k: 5}, suppression: 0.01}")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["metrics"]["scores.k-anonymity.holds"] == 1.0
    assert out["metrics"]["scores.k-anonymity"] >= 5
    notes = next(s for s in out["steps"] if s["step"] == "anon")["notes"]
    assert any("80 nodes (2 x 5 x 2 x 4 levels over sex, age, race, education); checked" in n for n in notes)
    assert any(n.startswith("lattice: chosen node [sex=") for n in notes)
    table = pacsv.read_csv(tmp_path / "out" / "anon.csv")
    assert table.column_names[:4] == ["sex", "age", "race", "education"] and "_row" not in table.column_names
    assert "_class" in table.column_names and table.num_rows <= 2000
    # the published values are hierarchy labels of each QI
    ages = set(pc.cast(table.column("age"), pa.string()).to_pylist())
    assert all(a == "*" or a.startswith("[") for a in ages) or all(a.isdigit() for a in ages)
    labels = set(sum((arx_hierarchy("education").level(i).to_pylist() for i in range(4)), []))
    assert set(table.column("education").to_pylist()) <= labels


def test_workflow_without_hierarchy_for_a_qi_is_one_line(cli, tmp_path):
    wf = lattice_workflow(tmp_path, HIER)
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert "quasi-identifier 'age' has no generalization hierarchy; add a hierarchy step" in res.output
    assert res.output.count("\n") == 1


def test_workflow_with_a_hierarchy_missing_a_value_stops_at_the_hierarchy_step(cli, tmp_path):
    lines = (ARX / "adult_hierarchy_education.csv").read_text().splitlines()
    short = write(tmp_path / "edu.csv", "\n".join(line for line in lines if not line.startswith("Bachelors")) + "\n")
    hier = {**AGE, **HIER, "education": f"{{arx: {short}}}"}
    res = cli("run", lattice_workflow(tmp_path, hier), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert "step 'hier': column 'education'" in res.output and "has no row for the value 'Bachelors'" in res.output


def test_workflow_with_an_unsatisfiable_model_names_the_least_violating_node(cli, tmp_path):
    wf = lattice_workflow(tmp_path, {**AGE, **HIER}, lattice="{model_params: {k: 2001}}")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert "the least violating node [sex=1, age=4, race=1, education=3] leaves 2000 of 2000 records" in res.output
    assert res.output.count("\n") == 1


@pytest.mark.parametrize("name, size", [("arx-adult-k5.yaml", "6,480"), ("mi-loss-adult.yaml", "874,800"),
                                        ("l-incognito-adult.yaml", "5,184"), ("gca-adult.yaml", "1,296")])
def test_shipped_lattice_workflows_are_valid_and_plan_shows_the_lattice_size(cli, name, size):
    from tests.support.helpers import WORKFLOWS

    res = cli("plan", WORKFLOWS / name)
    assert res.exit_code == 0, res.output
    assert f"lattice: {size} nodes (" in res.output


def test_plan_shows_the_lattice_size_and_runs_nothing(cli, tmp_path):
    wf = lattice_workflow(tmp_path, {**AGE, **HIER}, lattice="{model_params: {k: 5}, suppression: 0.01}")
    res = cli("plan", wf)
    assert res.exit_code == 0, res.output
    assert "lattice: 80 nodes (2 x 5 x 2 x 4 levels over sex, age, race, education)" in res.output
    assert "searches 2,000 records for k-anonymity (k=5), at most 20 suppressed; best by loss" in res.output
    assert "age: interval hierarchy with levels 0..4" in res.output
    assert not list(tmp_path.glob("*.duckdb")) and not (tmp_path / "out").exists()
    steps = {s["name"]: s for s in json.loads(cli("plan", wf, "--json").output)["steps"]}
    assert steps["anon"]["notes"][0].startswith("lattice: 80 nodes")
    quick = cli("plan", wf, "--no-preview")
    assert quick.exit_code == 0 and "nodes (" not in quick.output and "model_params" in quick.output


def test_plan_reports_bad_hierarchies_before_anything_runs(cli, tmp_path):
    res = cli("plan", lattice_workflow(tmp_path, HIER))
    assert res.exit_code == 2, res.output
    assert "step 'anon': lattice: quasi-identifier 'age' has no generalization hierarchy" in res.output
    assert res.output.count("\n") == 1 and "run " not in res.output
    lines = (ARX / "adult_hierarchy_education.csv").read_text().splitlines()
    short = write(tmp_path / "edu.csv", "\n".join(line for line in lines if not line.startswith("Bachelors")) + "\n")
    res = cli("plan", lattice_workflow(tmp_path, {**AGE, **HIER, "education": f"{{arx: {short}}}"}))
    assert res.exit_code == 2, res.output
    assert "step 'hier': column 'education'" in res.output and "has no row for the value 'Bachelors'" in res.output


@pytest.mark.slow
def test_arx_adult_k5_workflow(tmp_path_factory):
    """ARX's Adult, its 8 QIs and hierarchies, k = 5, no suppression (6,480 nodes)."""
    from tests.support.shipped import shipped_run

    out = shipped_run("arx-adult-k5", tmp_path_factory)
    assert out["metrics"]["scores.k-anonymity.holds"] == 1.0
    notes = " ".join(next(s for s in out["steps"] if s["step"] == "anon")["notes"])
    assert "6480 nodes" in notes and "0 record(s) suppressed" in notes


@pytest.mark.slow
def test_l_incognito_workflow_loss_equals_l_clusterings_relative_loss(cli, tmp_path):
    """Seed 001's baseline on all of Adult: distinct l-diversity holds on the output, and the
    lattice's objective (generalization-rl) equals L-clustering's relative-loss on it."""
    from tests.support.helpers import WORKFLOWS

    res = cli("run", WORKFLOWS / "l-incognito-adult.yaml", "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path,
              "--set", "anon.model_params={l: 3}", "--set", "typed.quasi=[age, sex, race, marital-status]", "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.output)["metrics"]
    assert m["scores.l-diversity.holds"] == 1.0 and m["scores.l-diversity"] >= 3
    assert m["scores.generalization-rl"] == pytest.approx(m["scores.relative-loss"], abs=1e-12)


@pytest.mark.slow
def test_mi_loss_adult_workflow(cli, tmp_path):
    """Seed 004's setting on all of Adult (11 QIs, 874,800 nodes), k = 5, MI Loss; the
    classifier is left out here (tests/plugins/utility/test_loss_models.py tests it)."""
    from tests.support.helpers import WORKFLOWS

    res = cli("run", WORKFLOWS / "mi-loss-adult.yaml", "--db", tmp_path / "s.duckdb", "--out-dir", tmp_path, "--json",
              "--set", "scores.metrics=[k-anonymity, loss, entropy-loss, mi-loss]",
              "--set", "baseline.metrics=[k-anonymity]")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m = out["metrics"]
    assert m["scores.k-anonymity.holds"] == 1.0
    # the weights the run used, against a computation that shares no code with the plugin
    # (tests/plugins/utility/test_loss_models.py: the MI definition over contingency tables)
    from tests.plugins.utility.test_loss_models import QI11, independent_mi_weights

    want = independent_mi_weights(data.adult_full(), QI11, "income")
    for q in QI11:
        assert m[f"scores.mi-loss.weight.{q}"] == pytest.approx(want[q], rel=1e-9, abs=1e-12), q
    assert m["scores.mi-loss.weight.capital-gain"] == pytest.approx(0.141, abs=5e-4)  # SPEC's plug-in 0.141
    notes = " ".join(next(s for s in out["steps"] if s["step"] == "anon")["notes"])
    assert "874800 nodes" in notes and "with mi-loss = " in notes


# -- the frequency table ------------------------------------------------------------------


@pytest.mark.parametrize("model, mparams, suppression, utility", [
    ("k-anonymity", {"k": 5}, 0.0, "loss"),
    ("k-anonymity", {"k": 10}, 0.05, "entropy-loss"),
    ("l-diversity", {"l": 3}, 0.01, "loss"),
    ("p-sensitive-k-anonymity", {"k": 4, "p": 2}, 0.02, "generalization-rl"),
    ("alpha-k-anonymity", {"k": 3, "alpha": 0.6}, 0.05, "loss"),
])
def test_the_frequency_table_search_publishes_what_the_record_search_does(monkeypatch, model, mparams,
                                                                           suppression, utility):
    """Searching the frequency table (distinct QI and sensitive combinations with their records,
    grouped by DuckDB) chooses the same node and publishes the same table, record for record,
    as searching one row per record."""
    t = adult(3000, quasi=("age", "sex", "race", "marital-status", "education"))
    runs = {}
    for frequency in (True, False):
        monkeypatch.setattr(lattice_module, "FREQUENCY", frequency)
        out, ctx = run_lattice(t, model=model, model_params=mparams, suppression=suppression, utility=utility)
        runs[frequency] = (out.data.sort_by("_row"), [n for n in ctx.notes if "chosen node" in n])
    (a, note_a), (b, note_b) = runs[True], runs[False]
    assert a.equals(b)
    assert note_a == note_b
    assert a.column(CLASS).null_count <= int(suppression * 3000)


def test_a_check_that_takes_no_weights_searches_one_row_per_record(monkeypatch):
    """A third-party check not declaring weighted_partitions sees one row per record."""
    seen = []

    class Rows(KAnonymity):
        name = "test.rows"
        weighted_partitions = False

        def partition_holds(self, partition, params):
            seen.append((partition.weights, partition.table.num_rows))
            return super().partition_holds(partition, params)

    use(Rows())
    t = adult(500)
    run_lattice(t, model="test.rows", model_params={"k": 3})
    assert seen and all(w is None and rows == 500 for w, rows in seen)
