"""``ed-differential-privacy``: SafePub's derived parameters against ARX's, the budget split,
the model's check on a partition, what the lattice states (privacy_loss, no claim, no cap),
and bad parameters in one line."""

import numpy as np
import pytest

from anonflow import registry as plugins
from anonflow.api import InputError, Partition
from anonflow.params import validate_params
from anonflow_std.common.dp_params import dp_settings, safepub_parameters, split_budget
from anonflow_std.privacy.ed_dp import EDDifferentialPrivacy

# ARX's own figures: org.deidentifier.arx.dp.ParameterCalculation (with the reliability
# package's interval arithmetic) compiled from ARX's source with javac 17 and run
# (new ParameterCalculation(epsilon, delta).getBeta() / getK(), printed with Double.toString)
ARX = [
    (0.5, 1e-6, 0.3934693402873664, 64),
    (1.0, 1e-6, 0.6321205588285574, 75),
    (2.0, 1e-6, 0.8646647167633871, 132),
    (1.0, 1e-5, 0.6321205588285574, 62),
    # the anonymization's share after ARX's split with 10 % to the search (below)
    (0.44999999999999996, 1e-6, 0.3623718483782265, 65),
    (0.8999999999999999, 1e-6, 0.5934303402594007, 74),
    (1.7999999999999998, 1e-6, 0.8347011117784132, 118),
]


@pytest.mark.parametrize("epsilon, delta, beta, k", ARX)
def test_beta_and_k_equal_arx_to_the_last_digit(epsilon, delta, beta, k):
    got_beta, got_k = safepub_parameters(epsilon, delta)
    assert got_beta == beta  # bit for bit: repr equal too
    assert repr(got_beta) == repr(beta) and got_k == k


def test_beta_is_the_lower_bound_of_one_minus_exp_minus_epsilon():
    # 1 - exp(-1) = 0.63212055882855767...; the lower bound lies at most a few ulps below it
    beta, _ = safepub_parameters(1.0, 1e-6)
    assert beta < 1 - np.exp(-1.0) + 1e-15 and 1 - np.exp(-1.0) - beta < 4e-16


@pytest.mark.parametrize("epsilon, anon, per_step", [
    # ARX (javac-run): lower(eps - 0.1 eps) and lower(0.1 eps / 125)
    (0.5, 0.44999999999999996, 0.00039999999999999996),
    (1.0, 0.8999999999999999, 0.0007999999999999999),
    (2.0, 1.7999999999999998, 0.0015999999999999999),
])
def test_budget_split_equals_arx(epsilon, anon, per_step):
    got_anon, search, got_step = split_budget(epsilon, 0.1, 125)
    assert (got_anon, got_step) == (anon, per_step) and search == epsilon * 0.1


def test_settings_default_steps_follow_arx_checks_per_qi_and_a_fixed_node_spends_no_search():
    s = dp_settings({"epsilon": 1.0, "delta": 1e-6}, 8)
    assert s["steps"] == 125 and s["search_share"] == 0.1 and (s["beta"], s["k"]) == (0.5934303402594007, 74)
    fixed = dp_settings({"epsilon": 1.0, "delta": 1e-6, "generalization": {"age": 1}}, 8)
    assert fixed["epsilon_anonymization"] == 1.0 and fixed["epsilon_search"] == 0.0
    assert (fixed["beta"], fixed["k"]) == (0.6321205588285574, 75)


def test_partition_holds_where_a_class_has_k_sampled_records():
    model = EDDifferentialPrivacy()
    params = validate_params(model.params, {"epsilon": 1.0, "delta": 1e-5})
    k = dp_settings(params)["k"]  # from epsilon 0.9 after the search's 10 %
    part = Partition(lambda: None, np.array([k - 1, k, 100, 0]), None, {})
    assert model.partition_holds(part, params).tolist() == [False, True, True, False]


def lattice():
    return plugins.get_registry().get("algorithm", "lattice").obj


def test_lattice_states_the_loss_claims_nothing_and_is_not_capped():
    lat = lattice()
    params = validate_params(lat.params, {"model": "ed-differential-privacy",
                                          "model_params": {"epsilon": 2.0, "delta": 1e-6, "steps": 50}})
    assert lat.privacy_loss(params) == {"measure": "approximate", "epsilon": 2.0, "delta": 1e-6,
                                        "beta": 0.8347011117784132, "k": 118, "search_share": 0.1, "steps": 50}
    assert lat.claims(params) == {} and lat.suppression_cap(params) == 1.0
    plain = validate_params(lat.params, {"model": "k-anonymity", "model_params": {"k": 5}})
    assert lat.privacy_loss(plain) is None and lat.suppression_cap(plain) == 0.0


@pytest.mark.parametrize("given, says", [
    ({"epsilon": 0.0, "delta": 1e-6}, "epsilon must be > 0"),
    ({"epsilon": -1.0, "delta": 1e-6}, "epsilon must be > 0"),
    ({"delta": 1e-6}, "epsilon must be > 0"),
    ({"epsilon": 1.0, "delta": 0.0}, "delta must be in (0, 1)"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be in (0, 1)"),
    ({"epsilon": 1.0, "delta": 1e-6, "search_share": 1.0}, "search_share must be in (0, 1)"),
    ({"epsilon": 1.0, "delta": 1e-6, "steps": 0}, "steps must be >= 1"),
])
def test_bad_parameters_are_one_line(given, says):
    lat = lattice()
    params = validate_params(lat.params, {"model": "ed-differential-privacy", "model_params": given})
    with pytest.raises(InputError) as err:
        lat.check(params)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_unknown_utility_for_safepub_is_one_line():
    lat = lattice()
    params = validate_params(lat.params, {"model": "ed-differential-privacy", "utility": "mi-loss",
                                          "model_params": {"epsilon": 1.0, "delta": 1e-6}})
    with pytest.raises(InputError, match="loss, precision, discernibility, entropy, aecs; not 'mi-loss'"):
        lat.check(params)


@pytest.mark.parametrize("epsilon", [50.0])
def test_an_epsilon_whose_k_cannot_be_derived_is_refused_in_one_line(epsilon):
    from anonflow_std.common.dp_params import dp_settings

    with pytest.raises(InputError, match=r"k cannot be derived for the anonymization's ε = 45 with δ = 1e-06 "
                                         r"\(undecidable relationship\); SafePub is meant for ε up to about 3"):
        dp_settings({"epsilon": epsilon, "delta": 1e-6})


def test_a_derivation_past_its_work_limit_is_refused_not_left_running(monkeypatch):
    import anonflow_std.common.dp_params as dp

    monkeypatch.setattr(dp, "MAX_TERMS", 1000)  # (1, 1e-6) needs about 9,000 terms
    dp.safepub_parameters.cache_clear()
    try:
        with pytest.raises(InputError, match="more than 1000 binomial terms"):
            dp.safepub_parameters(0.9, 1e-6)
    finally:
        dp.safepub_parameters.cache_clear()
