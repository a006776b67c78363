"""Every shipped workflow that publishes, run as shipped, and its published files re-checked
independently of anonflow's own checks: pyarrow group-bys over the published files alone
(what a reader of the release sees), against the model parameters the run claims."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support import leakscan
from tests.support.helpers import WORKFLOWS
from tests.support.shipped import shipped_run

PUBLISHING = sorted(p.name for p in WORKFLOWS.glob("*.yaml")
                    if any(s.get("uses") == "publish" for s in yaml.safe_load(p.read_text())["steps"].values()))


def _read(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    # an empty unquoted cell is a null (a suppressed cell); a quoted one is text
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(strings_can_be_null=True,
                                                                     quoted_strings_can_be_null=False,
                                                                     column_types={}, auto_dict_encode=False))


def _as_text(table: pa.Table, columns: list[str]) -> pa.Table:
    return pa.table({c: pc.cast(table.column(c), pa.string()) if not pa.types.is_nested(table.column(c).type)
                     else pa.array([json.dumps(v) for v in table.column(c).to_pylist()]) for c in columns})


def _smallest_group(table: pa.Table, keys: list[str]) -> int:
    counts = _as_text(table, keys).group_by(keys).aggregate([([], "count_all")])
    return int(pc.min(counts.column("count_all")).as_py())


def _smallest_compatible(table: pa.Table, keys: list[str]) -> int:
    """The smallest compatible count (docs/algorithms.md, "Suppressed cells as wildcards"): two
    records are compatible when they agree on every key where both are non-null; a record's
    count includes itself. Without a null, the smallest group. numpy over the distinct key
    tuples, each pair compared on every key."""
    if not any(table.column(k).null_count for k in keys):
        return _smallest_group(table, keys)
    text = _as_text(table, keys).to_pandas()
    distinct = text.value_counts(dropna=False).reset_index()
    weights = distinct.pop("count").to_numpy()
    ok = np.ones((len(distinct), len(distinct)), dtype=bool)
    for k in keys:
        col = distinct[k].to_numpy(dtype=object)
        null = pd.isna(col)
        ok &= (col[:, None] == col[None, :]) | null[:, None] | null[None, :]
    return int((ok @ weights).min())


def _fewest_distinct(table: pa.Table, keys: list[str], sensitive: str) -> int:
    t = _as_text(table, [*keys, sensitive])
    t = t.filter(pc.not_equal(t.column(sensitive), "?"))  # a missing value is not diversity
    per = t.group_by(keys).aggregate([(sensitive, "count_distinct")])
    return int(pc.min(per.column(f"{sensitive}_count_distinct")).as_py())


@pytest.mark.slow
@pytest.mark.parametrize("workflow", PUBLISHING)
def test_published_files_of_shipped_workflows_meet_the_claimed_models(tmp_path_factory, workflow):
    spec = yaml.safe_load((WORKFLOWS / workflow).read_text())
    typing = next(s for s in spec["steps"].values() if s.get("uses") == "typing")["with"]
    quasi, sensitive = leakscan.role_names(typing.get("quasi")), leakscan.role_names(typing.get("sensitive"))
    # run with --retain published (it changes no published byte): the store is then scanned for originals
    run = shipped_run(workflow.removesuffix(".yaml"), tmp_path_factory)
    metrics = run["metrics"]

    steps = spec["steps"]

    def scores_of(path: Path) -> list[str] | None:
        """The evaluate steps that scored the table a published file holds (the publish step
        naming the file, or the release folder holding it; its input), None if not found."""
        for name, step in steps.items():
            target = (step.get("with") or {}).get("path")
            if step.get("uses") != "publish" or not target:
                continue
            if path.name == Path(target).name or Path(target).name in path.parts:
                source = step["input"]
                return [e for e, st in steps.items() if st.get("uses") == "evaluate" and source in st.get("input", [])]
        return None

    def claimed(name: str, scores: list[str] | None) -> float | None:
        values = [v for key, v in metrics.items() if key.endswith(f".{name}")
                  and (scores is None or key.split(".")[0] in scores)]
        return max(values) if values else None

    def aggregates(path: Path) -> bool:
        """Whether a publish step of differentially private aggregates wrote the file (counts
        and sums, not records: tests/shipped/test_dp_adult.py checks them)."""
        return any(st.get("uses") == "publish" and (st.get("with") or {}).get("publisher") == "dp-aggregates"
                   and Path((st.get("with") or {}).get("path", "")).name in path.parts for st in steps.values())

    checked = 0
    for out in run["outputs"]:
        path = Path(out["path"])
        if path.suffix not in (".csv", ".parquet") or path.stem.endswith("-sa") or aggregates(path):
            continue
        scores = scores_of(path)   # each file against what its own table claims
        k = max([v for v in (claimed("k-anonymity.k", scores), claimed("p-sensitive-k-anonymity.k", scores)) if v]
                or [1])
        table = _read(path)
        assert table.num_rows == out["rows"]
        if path.stem.endswith("-qi"):  # a lossy join: k by class id; the SA counts add up per class
            sa = _read(path.with_name(path.name.replace("-qi.", "-sa.")))
            assert _smallest_group(table, ["class_id"]) >= k
            qi_sizes = dict(zip(*table.group_by("class_id").aggregate([([], "count_all")]).to_pydict().values()))
            sa_sums = dict(zip(*sa.group_by("class_id").aggregate([("count", "sum")]).to_pydict().values()))
            assert qi_sizes == sa_sums
            checked += 1
            continue
        keys = [q for q in quasi if q in table.column_names]
        assert keys, path
        assert _smallest_compatible(table, keys) >= k, (path, k)
        for name in ("l-diversity.l", "p-sensitive-k-anonymity.p"):
            need = claimed(name, scores)
            if need:
                assert _fewest_distinct(table, keys, sensitive[0]) >= need, (path, name, need)
        checked += 1
    assert checked
    # no original record, no unpublished original value, no dropped column's value in any file
    leakscan.assert_release_leaks_nothing(WORKFLOWS / workflow, run["dir"])
    # and the store, purged of its sources and intermediate tables, holds no unpublished original value
    # (ARX's Adult: every distinctive value is a hierarchy label, so nothing is looked for there)
    looked, found = leakscan.store_leaks(WORKFLOWS / workflow, run["db"], run["dir"])
    assert not found, (workflow, looked, sorted(found)[:10])
