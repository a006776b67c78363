import pytest

from anonflow.params import Param, ParamError, validate_params

DECL = (
    Param("k", "int", min=2),
    Param("gamma", "float", default=0.2, min=0.0),
    Param("objective", "str", default="apf", choices=("apf", "apf-safe", "min-il")),
    Param("columns", "list", items="str", default=None, nullable=True),
)


def test_defaults_are_filled_and_floats_accept_ints():
    assert validate_params(DECL, {"k": 5, "gamma": 1}) == {"k": 5, "gamma": 1.0, "objective": "apf", "columns": None}


@pytest.mark.parametrize("given, fragment", [
    ({}, "missing required parameter 'k'"),
    ({"k": 1}, "parameter 'k': expected an integer >= 2, got 1"),
    ({"k": "5"}, "expected an integer >= 2, got '5'"),
    ({"k": True}, "expected an integer"),
    ({"k": 5, "gama": 0.1}, "unknown parameter 'gama' (did you mean 'gamma'?)"),
    ({"k": 5, "objective": "apff"}, "expected one of 'apf', 'apf-safe', 'min-il', got 'apff'"),
    ({"k": 5, "gamma": -1}, "expected a number >= 0, got -1"),
    ({"k": 5, "columns": "a"}, "expected a list"),
    ({"k": 5, "columns": [1]}, "a list of str"),
    ({"k": 5, "gamma": float("nan")}, "finite"),
])
def test_bad_parameters_name_the_parameter_and_the_expectation(given, fragment):
    with pytest.raises(ParamError) as info:
        validate_params(DECL, given)
    assert fragment in str(info.value)


def test_integral_float_is_an_int():
    assert validate_params(DECL, {"k": 5.0})["k"] == 5


def test_an_exclusive_lower_bound():
    zeta = (Param("zeta", "float", default=1.8, above=0),)
    assert validate_params(zeta, {"zeta": 1e-9}) == {"zeta": 1e-9}
    for bad in (0, -1):
        with pytest.raises(ParamError, match=f"parameter 'zeta': expected a number > 0, got {bad}"):
            validate_params(zeta, {"zeta": bad})
    alpha = (Param("alpha", "float", above=0.0, max=1.0),)
    assert validate_params(alpha, {"alpha": 1}) == {"alpha": 1.0}
    with pytest.raises(ParamError, match=r"expected a number in \(0, 1\], got 0"):
        validate_params(alpha, {"alpha": 0})
    assert alpha[0].describe() == "alpha: float > 0.0 <= 1.0 (required)"
    assert zeta[0].to_json()["above"] == 0


def test_describe_is_compact():
    assert DECL[0].describe() == "k: int >= 2 (required)"
    assert DECL[1].describe() == "gamma: float >= 0.0 (default 0.2)"
