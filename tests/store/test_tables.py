import duckdb
import numpy as np
import pyarrow as pa
import pytest

from anonflow.errors import StoreError
from anonflow.schema import Attribute, Typing
from anonflow.store import MIGRATIONS, SCHEMA_VERSION, Store
from anonflow.table import TypedTable, table_hash


def test_hash_is_independent_of_row_order_and_chunking():
    a = pa.table({"_row": [2, 0, 1], "s": ["c", "a", None], "x": [3.0, 1.0, 2.0]})
    b = pa.concat_tables([pa.table({"_row": [0], "s": ["a"], "x": [1.0]}),
                          pa.table({"_row": [1, 2], "s": [None, "c"], "x": [2.0, 3.0]})])
    assert table_hash(a) == table_hash(b)


@pytest.mark.parametrize("change", [
    lambda t: t.set_column(1, "s", pa.array(["c", "a", "b"])),       # a value
    lambda t: t.set_column(1, "s", pa.array(["c", "a", ""])),        # null vs empty string
    lambda t: t.rename_columns(["_row", "t", "x"]),                  # a column name
    lambda t: t.set_column(2, "x", pa.array([3, 1, 2], pa.int64())),  # a type
    lambda t: t.slice(0, 2),                                          # a record
])
def test_hash_sees_every_kind_of_change(change):
    t = pa.table({"_row": [2, 0, 1], "s": ["c", "a", None], "x": [3.0, 1.0, 2.0]})
    assert table_hash(t) != table_hash(change(t))


def test_string_boundaries_are_unambiguous():
    t1 = pa.table({"_row": [0, 1], "s": ["ab", "c"]})
    t2 = pa.table({"_row": [0, 1], "s": ["a", "bc"]})
    assert table_hash(t1) != table_hash(t2)


def test_put_get_roundtrip_keeps_data_typing_and_hash(tmp_path):
    typing = Typing((Attribute("x", "quasi", "continuous"), Attribute("s", "sensitive", "nominal")))
    data = pa.table({"_row": pa.array([1, 0], pa.int64()), "x": [2.5, 1.0], "s": ["b", "a"]})
    with Store(tmp_path / "s.duckdb") as store:
        art = store.put(TypedTable(data, typing, {"k-anonymity": {"k": 2}}))
        again = store.put(TypedTable(data, typing, {"k-anonymity": {"k": 2}}))
        assert again == art  # content-addressed: stored once
        back = store.get(art.table)
        assert not back.loaded  # read from the store only when asked
        assert back.column("x").to_pylist() == [1.0, 2.5]
        back.data
    assert back.typing == typing
    assert back.claims == {"k-anonymity": {"k": 2}}
    assert back.data.column("_row").to_pylist() == [0, 1]
    assert table_hash(back.data) == table_hash(data)


def test_same_data_with_other_typing_is_another_artifact(tmp_path):
    data = pa.table({"_row": [0], "x": [1.0]})
    with Store(tmp_path / "s.duckdb") as store:
        a = store.put(TypedTable(data, Typing((Attribute("x", "quasi", "continuous"),))))
        b = store.put(TypedTable(data, Typing((Attribute("x", "sensitive", "continuous"),))))
    assert a.table != b.table


def test_migrations_are_recorded_and_idempotent(tmp_path):
    path = tmp_path / "s.duckdb"
    Store(path).close()
    Store(path).close()
    con = duckdb.connect(str(path))
    assert con.execute("SELECT count(*), max(version) FROM af_migrations").fetchone() == (len(MIGRATIONS), SCHEMA_VERSION)


def test_read_only_store_must_exist_and_be_ours(tmp_path):
    with pytest.raises(StoreError, match="no anonflow store"):
        Store(tmp_path / "missing.duckdb", read_only=True)
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE x (a INT)").close()
    with pytest.raises(StoreError, match="not an anonflow store"):
        Store(other, read_only=True)


def test_numeric_reads_columns_through_arrow():
    t = TypedTable(pa.table({"_row": [0, 1], "a": [1, 2], "b": [0.5, 1.5]}), Typing())
    X = t.numeric(["a", "b"])
    assert X.dtype == np.float64 and X.flags.c_contiguous
    assert X.tolist() == [[1.0, 0.5], [2.0, 1.5]]
