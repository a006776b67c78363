"""Issue 12, through the CLI: the engine's suppression cap (``max_suppression``), the lattice's
"no node satisfies" errors saying why, progress of long algorithms, one loss under one name
(evaluate counts suppressed records as the lattice's objective does), and ``anonflow plan``
checking the evaluate steps' metrics."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from anonflow import registry as plugins
from anonflow.api import CLASS, Algorithm, Param
from anonflow.store import Store

from tests.support.helpers import DATA
from tests.support.mockplugins import Provider

ARX = DATA / "arx"

# 9 records: (alpha,k)-GCA with k = 2, alpha = 0.5 forms 3 classes and leaves 3 'a' records over
TINY = "x,s\n" + "".join(f"{x},{s}\n" for x, s in
                         [(1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "a"), (6, "a"), (7, "b"), (8, "b"), (9, "c")])
GRADING = "{levels: [{alpha: 0.5, values: [a]}, {alpha: 0.5, values: [b]}, {alpha: 0.5, values: [c]}]}"


def tiny_workflow(folder: Path, algorithm: str = "{uses: alpha-k-gca, with: {k: 2, alpha: 0.5, choice: first}}",
                  sensitive: str = "[s]", evaluate: str = "") -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "tiny.csv").write_text(TINY)
    text = textwrap.dedent(f"""\
        name: tiny
        seed: 3
        sources:
          tiny: {{path: data/tiny.csv}}
        steps:
          typed:
            uses: typing
            input: tiny
            with: {{quasi: [x], sensitive: {sensitive}}}
          grouped: {algorithm.replace("{uses:", "{input: typed, uses:", 1)}
          published:
            uses: publish
            input: grouped
            with: {{publisher: csv, path: tiny.csv}}
        """)
    if evaluate:
        text += f"  scores: {evaluate}\n"
    path = folder / "wf.yaml"
    path.write_text(text)
    return path


def run(cli, wf: Path, *args: str):
    folder = wf.parent
    return cli("run", wf, "--db", folder / "s.duckdb", "--out-dir", folder / "published", *args)


# -- 1. the suppression cap -------------------------------------------------------------------


def test_gca_suppressing_more_than_the_default_cap_fails_in_one_line_saying_how_to_raise_it(cli, tmp_path):
    wf = tiny_workflow(tmp_path)
    res = run(cli, wf)
    assert res.exit_code == 1, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output
    assert ("step 'grouped': alpha-k-gca would suppress 3 of 9 records (33.3%), more than its cap "
            "max_suppression = 0.05 allows (0 records); to accept that, raise the cap: "
            "--set grouped.max_suppression=0.34") in res.output
    with Store(tmp_path / "s.duckdb") as store:
        rid = store.runs()[0]["run_id"]
        step = next(s for s in store.steps(rid) if s["step"] == "grouped")
        assert step["status"] == "failed" and "would suppress 3 of 9 records" in step["error"]
    # the suggested cap is enough
    res = run(cli, wf, "--set", "grouped.max_suppression=0.34")
    assert res.exit_code == 0, res.output


def test_graded_gca_is_capped_too(cli, tmp_path):
    wf = tiny_workflow(tmp_path, "{uses: alpha-i-k-gca, with: {k: 2, choice: first}}",
                       sensitive=f"{{s: {{grading: {GRADING}}}}}")
    res = run(cli, wf)
    assert res.exit_code == 1, res.output
    assert "step 'grouped': alpha-i-k-gca would suppress 3 of 9 records" in res.output
    assert "--set grouped.max_suppression=0.34" in res.output
    assert run(cli, wf, "--set", "grouped.max_suppression=0.34").exit_code == 0


def test_suppressed_counts_are_in_the_run_output_the_runs_command_and_the_step_summary(cli, tmp_path):
    wf = tiny_workflow(tmp_path, "{uses: alpha-k-gca, with: {k: 2, alpha: 0.5, choice: first, "
                                 "max_suppression: 0.4}}")
    res = run(cli, wf)
    assert res.exit_code == 0, res.output
    note = "3 record(s) suppressed, 33.33% of 9 (cap max_suppression = 0.4: at most 3)"
    assert note in res.output
    res = run(cli, wf, "--json", "--no-cache")
    out = json.loads(res.output)
    step = next(s for s in out["steps"] if s["step"] == "grouped")
    assert any(note in n for n in step["notes"])
    shown = cli("runs", out["run_id"], "--db", tmp_path / "s.duckdb")
    assert shown.exit_code == 0 and note in shown.output
    detail = json.loads(cli("runs", out["run_id"], "--db", tmp_path / "s.duckdb", "--json").output)
    summary = next(s for s in detail["steps"] if s["step"] == "grouped")["summary"]
    assert summary["suppressed"] == 3 and summary["suppression_limit"] == 3


def test_a_suppressing_algorithm_reports_zero_suppressed_in_its_summary(cli, tmp_path):
    """The summary key is there for every step of an algorithm that may suppress."""
    (tmp_path / "data").mkdir()
    wf = tiny_workflow(tmp_path, "{uses: alpha-k-gca, with: {k: 2, alpha: 1.0, choice: first}}")
    res = run(cli, wf, "--json")
    assert res.exit_code == 0, res.output
    detail = json.loads(cli("runs", json.loads(res.output)["run_id"], "--db", tmp_path / "s.duckdb", "--json").output)
    summary = next(s for s in detail["steps"] if s["step"] == "grouped")["summary"]
    assert summary["suppressed"] == 0 and summary["suppression_limit"] == 0


class _DropsLast(Algorithm):
    """A third party's algorithm that suppresses the last record."""

    version = "0.0.1"
    params = (Param("k", "int", default=2),)

    def run(self, table, params, ctx):
        n = table.num_rows
        labels = pa.array([i // 2 for i in range(n)], pa.int64(), mask=pa.array([i == n - 1 for i in range(n)]))
        return table.replace(data=table.data.append_column(CLASS, labels))


class Undeclared(_DropsLast):
    name = "test.undeclared"


class Declared(_DropsLast):
    name = "test.declared"
    suppresses = True


def use(*algorithms):
    pm, dists = plugins.plugin_manager()
    pm.register(Provider(algorithms=algorithms), name="issue12")
    plugins.set_registry(plugins.Registry(pm, dists))


def test_a_third_party_algorithm_gets_the_cap_only_by_declaring_that_it_suppresses(cli, tmp_path):
    use(Undeclared(), Declared())
    assert "max_suppression" in [p.name for p in Declared.params]
    assert "max_suppression" not in [p.name for p in Undeclared.params]
    wf = tiny_workflow(tmp_path, "{uses: test.undeclared}")
    res = run(cli, wf)
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert ("step 'grouped': algorithm 'test.undeclared'" in res.output
            and "suppressed 1 of 9 records (null _class) but does not declare that it suppresses records "
                "(Algorithm.suppresses), so none may be suppressed" in res.output)
    # declared: held to max_suppression (default 0.05 of 9 records: none)
    wf = tiny_workflow(tmp_path, "{uses: test.declared}")
    res = run(cli, wf)
    assert res.exit_code == 1 and "test.declared would suppress 1 of 9 records (11.1%)" in res.output
    assert "--set grouped.max_suppression=0.12" in res.output
    res = run(cli, wf, "--set", "grouped.max_suppression=0.12")
    assert res.exit_code == 0, res.output
    assert "1 record(s) suppressed, 11.11% of 9 (cap max_suppression = 0.12: at most 1)" in res.output


# -- 2. the lattice: why no node satisfies --------------------------------------------------------


def lattice_workflow(folder: Path, lattice: str, n: int = 400, metrics: str = "[k-anonymity]") -> Path:
    """test_lattice's workflow on n records of ARX's Adult: age in 5/10/20-year intervals, ARX's
    hierarchies for sex, race and education."""
    from tests.plugins.generalization.test_lattice import AGE, HIER
    from tests.plugins.generalization.test_lattice import lattice_workflow as workflow

    return workflow(folder, {**AGE, **HIER}, lattice, n, metrics)


@pytest.mark.parametrize("lattice, why", [
    ("{model: k-anonymity, model_params: {k: 401}}",
     "no node satisfies k-anonymity (k=401) with no record suppressed: k = 401 is larger than the number of "
     "records (400); the least violating node [sex=1, age=4, race=1, education=3] leaves 400 of 400 records in "
     "failing classes; no suppression allowance can help: relax the model"),
    ("{model: l-diversity, model_params: {l: 20}, suppression: 0.1}",
     "no node satisfies l-diversity (l=20) with at most 0.1 of the records (40) suppressed: l = 20, but "
     "'occupation' has only 13 distinct value(s) in the whole table"),
    ("{model: alpha-k-anonymity, model_params: {alpha: 0.1, k: 2}, suppression: 0.05}",
     "above its alpha 0.1: every node must suppress at least"),
])
def test_the_lattice_says_which_model_parameter_no_node_can_meet(cli, tmp_path, lattice, why):
    res = run(cli, lattice_workflow(tmp_path, lattice))
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "step 'anon': lattice: " in res.output
    assert why in res.output


def test_the_lattice_says_when_only_the_suppression_cap_is_too_small_and_the_suggestion_works(cli, tmp_path):
    wf = lattice_workflow(tmp_path, "{model: alpha-k-anonymity, model_params: {alpha: 0.17, k: 2}, suppression: 0.01}")
    res = run(cli, wf)
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1
    assert "with at most 0.01 of the records (4) suppressed; the least violating node [" in res.output
    assert ": it would suppress " in res.output and "records, the cap allows 4 (suppression = 0.01); raise it, " \
                                                   "e.g. --set anon.suppression=" in res.output
    suggested = res.output.split("--set ")[1].split(",")[0]
    res = run(cli, wf, "--set", suggested)
    assert res.exit_code == 0, res.output


# -- 3. progress ------------------------------------------------------------------------------------


@pytest.fixture
def bars(monkeypatch):
    """Record the progress bars the CLI would draw on a terminal."""
    from anonflow.cli import running as cli_module

    seen: list[dict] = []

    class Recorder(cli_module._Progress):
        def __init__(self, enabled):
            super().__init__(False)

        def progress(self, total, label=""):
            bar = {"total": total, "label": label, "done": 0}
            seen.append(bar)

            def advance(n=1):
                bar["done"] += n
            return advance

    monkeypatch.setattr(cli_module, "_Progress", Recorder)
    return seen


def test_maasae_reports_progress_to_the_end(cli, tmp_path, bars):
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""name: maasae-progress
seed: 3
sources:
  adult: {{path: {ARX / 'adult.csv'}, delimiter: ";"}}
steps:
  sample:
    uses: sample
    input: adult
    with: {{n: 300}}
  typed:
    uses: typing
    input: sample
    with: {{quasi: {{age: continuous, sex: nominal, race: nominal}}, sensitive: [occupation], others: drop}}
  grouped:
    uses: maasae
    input: typed
    with: {{k: 5, p: 2}}
""")
    res = run(cli, wf)
    assert res.exit_code == 0, res.output
    bar = next(b for b in bars if b["label"] == "maasae")
    assert bar["total"] == 300 and bar["done"] == 300


def test_gca_progress_reaches_the_end_when_records_are_left_over_or_suppressed(cli, tmp_path, bars):
    res = run(cli, tiny_workflow(tmp_path), "--set", "grouped.max_suppression=0.34")
    assert res.exit_code == 0, res.output
    bar = next(b for b in bars if b["label"] == "alpha-k-gca")
    assert bar["total"] == 9 and bar["done"] == 9


# -- 4. one loss under one name -------------------------------------------------------------------


@pytest.mark.parametrize("utility", ["loss", "entropy-loss", "mi-loss"])
def test_the_evaluate_step_reports_the_loss_the_lattice_optimised_under_suppression(cli, tmp_path, utility):
    wf = lattice_workflow(tmp_path, f"{{model: k-anonymity, model_params: {{k: 5}}, suppression: 0.02, "
                                    f"utility: {utility}}}", n=600, metrics="[loss, entropy-loss, mi-loss]")
    res = run(cli, wf, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m = out["metrics"]
    suppressed = m[f"scores.{utility}.suppressed"]
    assert suppressed > 0  # the test is about suppression
    notes = " ".join(next(s for s in out["steps"] if s["step"] == "anon")["notes"])
    assert f"with {utility} = {m[f'scores.{utility}']:.6g} (" in notes
    # the published records alone have their own name; the headline counts each suppressed
    # record as fully generalized (loss 1)
    published = m[f"scores.{utility}.published"]
    assert published < m[f"scores.{utility}"]
    assert m[f"scores.{utility}"] == pytest.approx(((600 - suppressed) * published + suppressed) / 600, rel=1e-12)


# -- 5. plan checks the evaluate steps' metrics --------------------------------------------------------


@pytest.mark.parametrize("evaluate, metric", [
    ("{uses: evaluate, input: [typed, grouped], with: {metrics: [k-anonymity, alpha-i-k-anonymity]}}",
     "alpha-i-k-anonymity"),
    ("{uses: evaluate, input: grouped, with: {metrics: [sensitivity-distance]}}", "sensitivity-distance"),
])
def test_plan_fails_on_a_metric_that_needs_a_grading_the_typing_lacks(cli, tmp_path, evaluate, metric):
    wf = tiny_workflow(tmp_path, "{uses: alpha-k-gca, with: {k: 2, alpha: 0.5, choice: first, max_suppression: 0.4}}",
                       evaluate=evaluate)
    res = cli("plan", wf)
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output
    assert (f"step 'scores': metric '{metric}': {metric} needs a sensitivity grading of 's'; declare it in the "
            "typing step") in res.output
    # the run fails on it too, after the algorithm ran: plan said so first
    res = run(cli, wf)
    assert res.exit_code == 2 and f"{metric} needs a sensitivity grading of 's'" in res.output


def test_plan_passes_when_the_grading_is_there(cli, tmp_path):
    wf = tiny_workflow(tmp_path, "{uses: alpha-k-gca, with: {k: 2, alpha: 0.5, choice: first, max_suppression: 0.4}}",
                       sensitive=f"{{s: {{grading: {GRADING}}}}}",
                       evaluate="{uses: evaluate, input: [typed, grouped], with: {metrics: [alpha-i-k-anonymity, "
                                "sensitivity-distance]}}")
    res = cli("plan", wf)
    assert res.exit_code == 0, res.output
    assert run(cli, wf).exit_code == 0


def test_plan_fails_on_mi_loss_without_a_label(cli, tmp_path):
    wf = lattice_workflow(tmp_path, "{model: k-anonymity, model_params: {k: 5}}", metrics="[loss, mi-loss]")
    wf.write_text(wf.read_text().replace(" label: [salary-class],", ""))
    res = cli("plan", wf)
    assert res.exit_code == 2, res.output
    assert "step 'scores': metric 'mi-loss': mi-loss needs a class label" in res.output
