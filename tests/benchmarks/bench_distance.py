"""Benchmark of the distance kernels on Adult with the 7 mixed QIs of SPEC section 4.

QI: age (continuous); sex, race, education, native-country, workclass (nominal); fnlwgt
(semantic, read as text; only records whose fnlwgt has exactly 6 digits are kept, as SPEC
section 4 says). Prints median wall-clock times in milliseconds::

    python tests/benchmarks/bench_distance.py

Importing this module has no side effects.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ADULT = Path(__file__).resolve().parents[2] / "workflows" / "data" / "adult" / "adult_full.csv"
QI = {"age": "continuous", "sex": "nominal", "race": "nominal", "education": "nominal",
      "native-country": "nominal", "workclass": "nominal", "fnlwgt": "semantic"}
#: class size used for the "one class" and "all classes" timings.
CLASS_SIZE = 10


def load_adult(path: Path = ADULT) -> tuple[Any, int]:
    """The typed Adult table restricted to 6-digit fnlwgt, and the number of records read."""
    from anonflow.schema import ROW, Attribute, Typing
    from anonflow.table import TypedTable

    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types={"fnlwgt": pa.string()}))
    total = table.num_rows
    table = table.filter(pc.equal(pc.utf8_length(table["fnlwgt"]), 6))
    table = table.add_column(0, ROW, pa.array(np.arange(table.num_rows), pa.int64()))
    attrs = tuple(Attribute(c, "quasi" if c in QI else ("sensitive" if c == "occupation" else "insensitive"),
                            QI.get(c) if c != "occupation" else "nominal")
                  for c in table.column_names if c != ROW)
    return TypedTable(table, Typing(attrs)), total


def median_ms(fn: Callable[[], object], repeat: int = 200, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def run(repeat: int = 200, seed: int = 0) -> dict[str, float]:
    """All timings (ms, medians) plus the record counts."""
    from anonflow_std.common import distance as D
    from anonflow_std.common.encode import encode

    table, total = load_adult()
    enc = encode(table)
    n = enc.n
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    members = np.sort(perm[:CLASS_SIZE])
    cent = D.centroid(enc, members)
    labels = np.empty(n, dtype=np.int64)
    labels[perm] = np.arange(n) // CLASS_SIZE
    allc = D.centroids(enc, labels)
    i = int(perm[0])
    out = {
        "records_read": float(total),
        "records_kept": float(n),
        "fnlwgt_distinct": float(enc["fnlwgt"].m),  # type: ignore[union-attr]
        "encode_ms": median_ms(lambda: encode(table), repeat=max(repeat // 10, 5), warmup=1),
        "a_centroid_to_all_ms": median_ms(lambda: D.centroid_distances(enc, cent), repeat),
        "b_record_to_all_ms": median_ms(lambda: D.record_distances(enc, i), repeat),
        "centroid_of_one_class_ms": median_ms(lambda: D.centroid(enc, members), repeat),
        "class_il_one_class_ms": median_ms(lambda: D.class_il(enc, members), repeat),
        "centroids_all_classes_ms": median_ms(lambda: D.centroids(enc, labels), max(repeat // 10, 5)),
        "record_to_all_centroids_ms": median_ms(lambda: D.distances_to_centroids(enc, i, allc), repeat),
        "il_all_classes_ms": median_ms(lambda: D.il_by_class(enc, labels, cents=allc), max(repeat // 10, 5)),
        "classes": float(allc.g),
    }
    return out


def main() -> None:
    r = run()
    print(f"Adult: {int(r['records_read'])} records read, {int(r['records_kept'])} with a 6-digit fnlwgt "
          f"({int(r['fnlwgt_distinct'])} distinct codes); 7 QIs; median wall-clock times")
    print(f"  encode()                                   {r['encode_ms']:8.3f} ms")
    print(f"  (a) one class centroid -> all records      {r['a_centroid_to_all_ms']:8.3f} ms   (target < 5 ms)")
    print(f"  (b) one record -> all records              {r['b_record_to_all_ms']:8.3f} ms")
    print(f"  centroid of one class ({CLASS_SIZE} records)          {r['centroid_of_one_class_ms']:8.3f} ms")
    print(f"  IL of one class ({CLASS_SIZE} records)                {r['class_il_one_class_ms']:8.3f} ms")
    print(f"  centroids of all {int(r['classes'])} classes             {r['centroids_all_classes_ms']:8.3f} ms")
    print(f"  one record -> all {int(r['classes'])} class centroids    {r['record_to_all_centroids_ms']:8.3f} ms")
    print(f"  IL of all {int(r['classes'])} classes (centroids given) {r['il_all_classes_ms']:8.3f} ms")


if __name__ == "__main__":
    main()
