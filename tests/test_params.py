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


def test_describe_is_compact():
    assert DECL[0].describe() == "k: int >= 2 (required)"
    assert DECL[1].describe() == "gamma: float >= 0.0 (default 0.2)"
