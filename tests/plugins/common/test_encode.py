"""Encoding of typed columns (SPEC section 1)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from anonflow.errors import InputError
from anonflow_std.common.encode import Continuous, Nominal, Ordinal, Semantic, encode, ordinal_positions
from anonflow.schema import ROW, Attribute, Typing
from anonflow.table import TypedTable
from anonflow.testing import typed_table

from .helpers import table


def test_continuous_min_max_scaling():
    t = typed_table({"x": [10, 20, 40], "c": [5.0, 5.0, 5.0]}, quasi={"x": "continuous", "c": "continuous"})
    enc = encode(t)
    x = enc["x"]
    assert isinstance(x, Continuous) and x.type == "continuous"
    assert (x.lo, x.hi) == (10.0, 40.0)
    np.testing.assert_allclose(x.scaled, [0.0, 1 / 3, 1.0])  # (x - 10) / 30
    np.testing.assert_array_equal(enc["c"].scaled, [0.0, 0.0, 0.0])  # constant column: all 0
    np.testing.assert_allclose(x.unscale([0.5]), [25.0])


def test_nominal_sorted_dictionary_and_decode():
    t = typed_table({"c": ["b", "a", "c", "a"]}, quasi={"c": "nominal"})
    c = encode(t)["c"]
    assert isinstance(c, Nominal)
    assert c.categories == ["a", "b", "c"]
    assert c.codes.dtype == np.int32
    np.testing.assert_array_equal(c.codes, [1, 0, 2, 0])
    assert c.decode().to_pylist() == ["b", "a", "c", "a"]
    assert c.decode([2, 2]).to_pylist() == ["c", "c"]


def test_nominal_numbers_sort_numerically():
    c = encode(typed_table({"n": [10, 9, 100]}, quasi={"n": "nominal"}))["n"]
    assert c.categories == [9, 10, 100]
    np.testing.assert_array_equal(c.codes, [1, 0, 2])


def test_ordinal_positions_with_step_weights():
    # order low < mid < high, W(low,mid) = 1, W(mid,high) = 3: positions 0, 1/4, 4/4
    t = table({"e": ["high", "low", "mid", "high"]}, {"e": "ordinal"},
              orders={"e": ("low", "mid", "high", "top")}, weights={"e": (1.0, 3.0, 4.0)})
    e = encode(t)["e"]
    assert isinstance(e, Ordinal)
    assert e.categories == ["low", "mid", "high", "top"]  # declared order, "top" absent from the data
    np.testing.assert_allclose(e.pos, [0.0, 1 / 8, 4 / 8, 1.0])  # cumulative 0,1,4,8 over 8
    np.testing.assert_array_equal(e.codes, [2, 0, 1, 2])
    np.testing.assert_allclose(e.scaled, [0.5, 0.0, 1 / 8, 0.5])
    np.testing.assert_allclose(ordinal_positions([1, 1]), [0, 0.5, 1])
    np.testing.assert_array_equal(ordinal_positions([]), [0.0])


def test_ordinal_defaults_and_errors():
    e = encode(table({"e": [3, 1, 2]}, {"e": "ordinal"}))["e"]  # no order: sort order, unit steps
    assert e.categories == [1, 2, 3]
    np.testing.assert_allclose(e.scaled, [1.0, 0.0, 0.5])
    # integer data with a textual order (as the typing step stores it)
    e = encode(table({"e": [3, 1, 2]}, {"e": "ordinal"}, orders={"e": ("3", "2", "1")}))["e"]
    np.testing.assert_array_equal(e.codes, [0, 2, 1])
    with pytest.raises(InputError, match="not in its 'order'"):
        encode(table({"e": ["a", "z"]}, {"e": "ordinal"}, orders={"e": ("a", "b")}))
    with pytest.raises(InputError, match="step weights"):
        encode(table({"e": ["a", "b"]}, {"e": "ordinal"}, orders={"e": ("a", "b")}, weights={"e": (1.0, 2.0)}))
    with pytest.raises(InputError, match="positive"):
        encode(table({"e": ["a", "b"]}, {"e": "ordinal"}, orders={"e": ("a", "b")}, weights={"e": (0.0,)}))


def test_semantic_codes_cht_and_options():
    t = table({"z": ["150002", "061110", "150001", "150002"]}, {"z": "semantic"})
    z = encode(t)["z"]
    assert isinstance(z, Semantic)
    assert z.categories == ["061110", "150001", "150002"]
    np.testing.assert_array_equal(z.codes, [2, 0, 1, 2])
    assert z.cht is not None and z.cht.codes.equals(z.dictionary)
    assert (z.cht.beta, z.cht.w12) == (1.0, 0.0)  # defaults: the seed's experiments
    t = table({"z": ["111", "112"]}, {"z": "semantic"}, options={"z": {"beta": 2.0, "w12": None}})
    z = encode(t)["z"]
    assert (z.cht.beta, z.cht.w12) == (2.0, None)
    # integers are read as their decimal text
    z = encode(table({"z": [123456, 123457]}, {"z": "semantic"}))["z"]
    assert z.categories == ["123456", "123457"]


def test_attribute_without_options_field_is_read_defensively():
    class Bare:  # an Attribute-like object from before 'options' existed
        name, role, type, order, weights = "z", "quasi", "semantic", None, None

    t = table({"z": ["111", "112"]}, {"z": "semantic"})
    from anonflow_std.common import encode as enc_mod
    z = enc_mod._semantic(t, Bare())  # type: ignore[arg-type]
    assert (z.cht.beta, z.cht.w12) == (1.0, 0.0)


def test_default_columns_are_the_quasi_identifiers_in_typing_order():
    t = typed_table({"b": ["x", "y"], "s": ["p", "q"], "a": [1, 2]},
                    quasi={"b": "nominal", "a": "continuous"}, sensitive={"s": "nominal"})
    enc = encode(t)
    assert enc.names == ["b", "a"] and enc.n == 2
    assert [a.type for a in enc.attributes] == ["nominal", "continuous"]
    assert encode(t, ["s"]).names == ["s"]
    np.testing.assert_array_equal(enc.rows, [0, 1])


def test_take_keeps_the_parent_encoding():
    t = table({"x": [0.0, 10.0, 5.0], "c": ["a", "b", "c"], "z": ["111", "211", "112"]},
              {"x": "continuous", "c": "nominal", "z": "semantic"})
    enc = encode(t)
    sub = enc.take([2, 0])
    assert sub.n == 2
    np.testing.assert_array_equal(sub.rows, [2, 0])
    assert (sub["x"].lo, sub["x"].hi) == (0.0, 10.0)
    np.testing.assert_allclose(sub["x"].scaled, [0.5, 0.0])
    assert sub["c"].categories == ["a", "b", "c"]
    assert sub.decode("c").to_pylist() == ["c", "a"]
    assert sub["z"].cht is enc["z"].cht
    assert enc.take(np.array([False, True, True])).n == 2
    with pytest.raises(TypeError):
        enc.decode("x")


def test_missing_and_untyped_are_errors():
    with pytest.raises(InputError, match="missing"):
        encode(typed_table({"c": ["a", None]}, quasi={"c": "nominal"}))
    with pytest.raises(InputError, match="NaN"):
        encode(typed_table({"x": [1.0, float("nan")]}, quasi={"x": "continuous"}))
    with pytest.raises(InputError, match="not numeric"):
        encode(typed_table({"x": ["a", "b"]}, quasi={"x": "continuous"}))
    t = typed_table({"c": ["a"], "d": ["b"]}, quasi={"c": "nominal"})
    with pytest.raises(InputError, match="no attribute type"):
        encode(t, ["d"])
    with pytest.raises(InputError, match="no typing"):
        encode(t, ["zz"])
    with pytest.raises(InputError, match="no quasi"):
        encode(typed_table({"c": ["a"]}))


def test_chunked_columns_and_no_row_column():
    data = pa.table({"c": pa.chunked_array([["b", "a"], ["c", "b"]]), "x": pa.chunked_array([[1, 2], [3, 4]])})
    t = TypedTable(data, Typing((Attribute("c", "quasi", "nominal"), Attribute("x", "quasi", "continuous"))))
    enc = encode(t)
    np.testing.assert_array_equal(enc["c"].codes, [1, 0, 2, 1])
    np.testing.assert_array_equal(enc.rows, [0, 1, 2, 3])
    assert ROW not in t.columns
