"""The store's privacy ledger: what each run's differentially private steps spent, per source
content hash, composed with what earlier runs spent (OpenDP's basic and zCDP composition, the
tighter one named) against a source's declared budget; a run that would overspend is refused
in one line before any record enters the store; a spend is charged as the step starts and never
taken back; a cached step is not charged again; purging the store never removes the ledger."""

from __future__ import annotations

import json
import math

import duckdb
import pytest

from anonflow.dpcompose import compose, zcdp_epsilon
from anonflow.privacyloss import Charge
from anonflow.store import Store

from tests.steps.dpmock import Spend, project, register, spend_step


def _run(cli, wf, db, *args, code=0):
    res = cli("run", wf, "--db", db, *args)
    assert res.exit_code == code, res.output
    return res


def _ledger(db):
    with Store(db, read_only=True) as store:
        return store.charges()


# -- composition (OpenDP), numbers worked out by hand ---------------------------------------

def test_basic_composition_sums_epsilon_and_delta():
    # pure 0.75 -> (0.75, 0); approximate (0.5, 1e-7) and (0.25, 2e-7):
    # ε = 0.75 + 0.5 + 0.25 = 1.5, δ = 0 + 1e-7 + 2e-7 = 3e-7
    got = compose([Charge("pure", 0.75, 0.0), Charge("approximate", 0.5, 1e-7), Charge("approximate", 0.25, 2e-7)],
                  1e-6)
    assert got["composition"] == "basic"
    assert got["epsilon"] == pytest.approx(1.5, rel=1e-12) and got["delta"] == pytest.approx(3e-7, rel=1e-12)
    assert got["pure"] == 0.75 and got["approximate"] == pytest.approx([0.75, 3e-7]) and got["rho"] == 0.0


def test_zcdp_composition_sums_rho_and_converts_with_opendps_own_function():
    import opendp.prelude as dp

    # ρ = 0.125 + 0.075 = 0.2, stated as (ε, δ) at the budget's δ = 1e-6
    got = compose([Charge("zcdp", rho=0.125), Charge("zcdp", rho=0.075)], 1e-6)
    assert got["composition"] == "zcdp" and got["rho"] == pytest.approx(0.2, rel=1e-12)
    # OpenDP's own conversion, of a Gaussian mechanism built to spend ρ = 1 / (2σ²) = 0.2 (σ² = 2.5)
    dp.enable_features("contrib")
    try:
        gauss = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float),
                                   scale=math.sqrt(2.5))
        assert gauss.map(1.0) == pytest.approx(0.2, rel=1e-12)
        expected = dp.c.make_zCDP_to_approxDP(gauss).map(1.0).epsilon(1e-6)
    finally:
        dp.disable_features("contrib")
    assert got["epsilon"] == pytest.approx(expected, rel=1e-9) and got["delta"] == 1e-6
    # below the classical bound ρ + 2·sqrt(ρ·ln(1/δ)) = 0.2 + 2·sqrt(0.2 · 13.8155) = 3.5245
    assert 3.0 < got["epsilon"] < 0.2 + 2 * math.sqrt(0.2 * math.log(1e6))
    assert zcdp_epsilon(0.2, 0.0) == math.inf  # no δ: no (ε, δ) statement of ρ


def test_the_tighter_composition_is_chosen_and_named():
    # 30 pure losses of ε = 0.1: basic gives ε = 3.0 (δ = 0); zCDP gives ρ = 30 · 0.1²/2 = 0.15,
    # which OpenDP states at δ = 1e-6 as ε = 2.6729...: tighter, so chosen
    many = [Charge("pure", 0.1, 0.0)] * 30
    got = compose(many, 1e-6)
    assert got["composition"] == "zcdp"
    assert got["epsilon"] == pytest.approx(zcdp_epsilon(0.15, 1e-6), rel=1e-9)
    assert 2.6 < got["epsilon"] < 2.7 and got["delta"] == 1e-6
    # two of ε = 0.5: basic ε = 1.0 beats zCDP (ρ = 0.25 -> ε ≈ 3.9 at 1e-6)
    got = compose([Charge("pure", 0.5, 0.0)] * 2, 1e-6)
    assert (got["composition"], got["epsilon"], got["delta"]) == ("basic", 1.0, 0.0)


def test_mixed_measures_give_zcdp_the_delta_the_approximate_losses_leave():
    # (0.5, 4e-7) approximate + ρ = 0.1: ρ is stated at δ = 1e-6 - 4e-7 = 6e-7, then summed
    got = compose([Charge("approximate", 0.5, 4e-7), Charge("zcdp", rho=0.1)], 1e-6)
    assert got["epsilon"] == pytest.approx(0.5 + zcdp_epsilon(0.1, 6e-7), rel=1e-9)
    assert got["delta"] == pytest.approx(1e-6, rel=1e-9)
    # no δ left for ρ: infinite ε, so any budget refuses it
    assert compose([Charge("approximate", 0.5, 1e-6), Charge("zcdp", rho=0.1)], 1e-6)["epsilon"] == math.inf


# -- the ledger through runs ---------------------------------------------------------------

BUDGET = "{epsilon: 2.0, delta: 1.0e-6}"


def test_two_runs_compose_and_the_third_is_refused_before_anything_is_read(cli, tmp_path):
    register()
    db = tmp_path / "s.duckdb"
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 0.75}"), budget=BUDGET)
    _run(cli, wf, db)
    _run(cli, wf, db, "--no-cache")  # a run that draws again spends again: 0.75 + 0.75 = 1.5
    rows = _ledger(db)
    assert [(r["step"], r["source_name"], r["measure"], r["epsilon"], r["delta"], r["rho"]) for r in rows] == \
        [("noisy", "people", "pure", 0.75, 0.0, None)] * 2
    with Store(db, read_only=True) as store:
        before = (store.runs(50), store.con.execute("SELECT count(*) FROM af_tables").fetchone()[0])
    # 1.5 + 0.75 = 2.25 > 2.0
    res = _run(cli, wf, db, "--no-cache", code=2)
    assert res.output.strip() == (
        f"Error: {wf}: source 'people': the run would spend ε=2.25, δ=0 in all (basic composition), over the "
        f"budget ε=2, δ=1e-06 of source 'people' (sha256 {rows[0]['source_hash'][:16]}...): earlier runs spent "
        "ε=1.5, δ=0 (basic composition), this run asks noisy: ε=0.75, δ=0; refused before any record is read")
    with Store(db, read_only=True) as store:  # no run recorded, no table read into the store
        assert (store.runs(50), store.con.execute("SELECT count(*) FROM af_tables").fetchone()[0]) == before
    assert len(_ledger(db)) == 2


def test_the_refused_run_reads_no_record_of_a_new_file(cli, tmp_path):
    """The same content under another file name and workflow is the same account (by content
    hash); the refused run leaves no table of it in the store."""
    register()
    db = tmp_path / "s.duckdb"
    _run(cli, project(tmp_path, spend_step("noisy", "{measure: approximate, epsilon: 1.5, delta: 1.0e-7}"),
                      budget=BUDGET), db)
    (tmp_path / "copy.csv").write_bytes((tmp_path / "people.csv").read_bytes())
    wf2 = project(tmp_path, spend_step("other", "{measure: pure, epsilon: 0.6}"), budget=BUDGET,
                  name="wf2.yaml", data="copy.csv")
    with Store(db) as store:  # the first run's tables gone: whatever a refused run read would show
        store.con.execute("DELETE FROM af_tables")
    res = _run(cli, wf2, db, code=2)
    assert "of source 'people'" in res.output and "this run asks other: ε=0.6, δ=0" in res.output
    assert "earlier runs spent ε=1.5, δ=1e-07" in res.output  # 1.5 + 0.6 = 2.1 > 2.0
    with Store(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM af_tables").fetchone()[0] == 0
        assert len(store.runs(50)) == 1


def test_a_zcdp_spend_is_checked_at_the_budgets_delta(cli, tmp_path):
    register()
    db = tmp_path / "s.duckdb"
    # ρ = 0.1 at δ = 1e-6 is ε = zcdp_epsilon(0.1, 1e-6) = 2.04...: within 3.0, twice (ρ = 0.2: 3.13) not
    wf = project(tmp_path, spend_step("gauss", "{measure: zcdp, rho: 0.1}"), budget="{epsilon: 3.0, delta: 1.0e-6}")
    _run(cli, wf, db)
    res = _run(cli, wf, db, "--no-cache", code=2)
    assert f"the run would spend ε={zcdp_epsilon(0.2, 1e-6):.6g}, δ=1e-06 in all (zcdp composition)" in res.output
    # with δ = 0 no zCDP loss fits at all
    wf0 = project(tmp_path, spend_step("gauss", "{measure: zcdp, rho: 0.01}"), budget="{epsilon: 100}",
                  name="wf0.yaml", data="other.csv")
    res = _run(cli, wf0, db, code=2)
    assert "the run would spend ε=inf" in res.output


def test_a_cached_step_spends_nothing_again(cli, tmp_path):
    register()
    db = tmp_path / "s.duckdb"
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 0.5}"))
    _run(cli, wf, db)
    _run(cli, wf, db)  # served from the store: the same release, no new draw
    assert len(_ledger(db)) == 1


def test_a_run_failing_after_the_dp_step_keeps_its_charge(cli, tmp_path):
    """Charged when the step starts, never taken back: a failure later in the run (or in the
    step itself, whose message may depend on the data) does not refund it."""
    class Boom(Spend):
        name = "test.boom"

        def privacy_loss(self, params):
            return None

        def run(self, table, params, ctx):
            raise RuntimeError("downstream failure")

    register(Spend(), Boom())
    db = tmp_path / "s.duckdb"
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 0.5}", publish=False)
                 + "after:\n  uses: test.boom\n  input: noisy\n")
    res = _run(cli, wf, db, code=1)
    assert "downstream failure" in res.output
    rows = _ledger(db)
    assert [(r["step"], r["epsilon"]) for r in rows] == [("noisy", 0.5)]
    with Store(db, read_only=True) as store:
        assert store.run(rows[0]["run_id"])["status"] == "failed"


def test_purging_never_erases_the_ledger(cli, tmp_path):
    register()
    db = tmp_path / "s.duckdb"
    _run(cli, project(tmp_path, spend_step("noisy", "{measure: zcdp, rho: 0.05}"), budget=BUDGET), db)
    _run(cli, project(tmp_path, spend_step("again", "{measure: pure, epsilon: 0.25}"), budget=BUDGET,
                      name="wf2.yaml", retain="none"), db)  # retain: none purges as the run ends
    before = _ledger(db)
    assert len(before) == 2
    for args in (["--run", before[0]["run_id"]], ["--all"]):
        res = cli("purge", "--db", db, *args)
        assert res.exit_code == 0, res.output
        assert _ledger(db) == before
    with Store(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM af_tables WHERE purged_at IS NULL").fetchone()[0] == 0
        assert len(store.privacy_accounts()[0]["charges"]) == 2


def test_ledger_rows_hold_no_data_value(cli, tmp_path):
    register()
    db = tmp_path / "s.duckdb"
    _run(cli, project(tmp_path, spend_step("noisy", "{measure: approximate, epsilon: 1, delta: 1.0e-7}"),
                      budget=BUDGET), db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = [r[0] for r in con.execute("DESCRIBE af_privacy_ledger").fetchall()]
        rows = con.execute("SELECT * FROM af_privacy_ledger").fetchall() + \
            con.execute("SELECT * FROM af_privacy_budgets").fetchall()
    finally:
        con.close()
    assert cols == ["run_id", "step", "source_hash", "source_name", "measure", "epsilon", "delta", "rho",
                    "charged_at"]
    values = {str(v) for row in rows for v in row}
    data = set((tmp_path / "people.csv").read_text().replace("\n", ",").split(","))
    assert not (values & data - {""})
    assert json.loads(json.dumps([list(map(str, r)) for r in rows]))  # names, hashes, figures, times


def test_an_overspending_run_is_refused_before_its_source_is_opened_for_records(cli, tmp_path):
    """The source file is no CSV at all: planning would fail reading it. With its account
    spent (charged here as earlier runs would have), the refusal comes first: the budget is
    checked on the file's hash alone."""
    register()
    db = tmp_path / "s.duckdb"
    (tmp_path / "people.csv").write_bytes(b"\x00\xff\xfe binary, not a CSV \x00\x00\n" * 3)
    wf = project(tmp_path, spend_step("noisy", "{measure: pure, epsilon: 0.5}"), budget=BUDGET)
    res = _run(cli, wf, db, code=2)
    assert "source 'people'" in res.output and "budget" not in res.output  # read: the file is no CSV
    from anonflow.runner.privacy_budget import source_identity
    from anonflow.workflow.spec import load_workflow

    identity = source_identity(load_workflow(wf).sources["people"])
    with Store(db) as store:
        store.charge("earlier", "noisy", [(identity, "people", Charge("pure", 1.75, 0.0))])
    res = _run(cli, wf, db, code=2)
    assert res.output.strip().startswith(f"Error: {wf}: source 'people': the run would spend ε=2.25, δ=0 in all")
    assert res.output.strip().endswith("earlier runs spent ε=1.75, δ=0 (basic composition), this run asks noisy: "
                                       "ε=0.5, δ=0; refused before any record is read")
