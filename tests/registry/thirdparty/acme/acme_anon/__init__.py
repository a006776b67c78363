"""acme-anon: Mondrian (median cuts), t-closeness (equal-distance EMD) and JSON Lines.

Written against anonflow's documented plugin API only (``anonflow.api``), as a third party
would; tests/registry/test_third_party.py installs it into a scratch site and drives it from the CLI.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from anonflow.api import (CLASS, Algorithm, InputError, Metric, Output, Param, Publisher, atomic_write, hookimpl,
                          interval_labels, mark_generalized)

#: changed by the test to a "fix" without a version bump
WIDEN = 0


class Mondrian(Algorithm):
    name = "acme.mondrian"
    version = "2.3.0"
    description = "Mondrian: median cuts on the widest continuous QI until a cut would leave fewer than k"
    params = (Param("k", "int", default=5, min=2),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["k"]}}

    def check(self, params, table=None, **_):
        if table is not None:
            for q in table.typing.quasi:
                if table.typing.get(q).type != "continuous":
                    raise InputError(f"acme.mondrian: quasi-identifier {q!r} must be typed continuous")

    def run(self, table, params, ctx):
        k = params["k"]
        quasi = table.typing.quasi
        X = np.column_stack([table.data.column(q).to_numpy().astype(float) for q in quasi])
        span = np.ptp(X, axis=0)
        span[span == 0] = 1.0
        labels = np.zeros(len(X), dtype=np.int64)
        todo, done = [np.arange(len(X))], []
        while todo:
            idx = todo.pop()
            widths = np.ptp(X[idx], axis=0) / span
            for dim in np.argsort(-widths, kind="stable"):
                col = X[idx, dim]
                median = np.median(col)
                left = col <= median if (col < median).sum() < k else col < median
                if left.sum() >= k and (~left).sum() >= k:
                    todo += [idx[~left], idx[left]]
                    break
            else:
                done.append(idx)
        for c, idx in enumerate(sorted(done, key=lambda a: a[0])):
            labels[idx] = c
        data = table.data
        typing = table.typing
        for j, q in enumerate(quasi):
            lo = np.minimum.reduceat(X[np.argsort(labels, kind="stable"), j], _starts(labels))[labels] - WIDEN
            hi = np.maximum.reduceat(X[np.argsort(labels, kind="stable"), j], _starts(labels))[labels] + WIDEN
            data = data.set_column(data.column_names.index(q), q, pa.array(interval_labels(lo, hi), pa.string()))
            data = data.append_column(f"{q}_lo", pa.array(lo)).append_column(f"{q}_hi", pa.array(hi))
            typing = mark_generalized(typing, q, "interval", lo=f"{q}_lo", hi=f"{q}_hi")
        ctx.note(f"acme.mondrian: {len(done)} classes")
        return table.replace(data=data.append_column(CLASS, pa.array(labels)), typing=typing)


def _starts(labels):
    counts = np.bincount(labels)
    return np.concatenate([[0], np.cumsum(counts)[:-1]])


class TCloseness(Metric):
    name = "acme.t-closeness"
    version = "2.3.0"
    category = "privacy"
    requires_original = False
    description = "t-closeness with the equal-distance EMD over the sensitive attribute"
    params = (Param("t", "float", default=None, min=0.0, max=1.0),)

    def compute(self, original, anonymized, params, ctx):
        sensitive = anonymized.typing.sensitive
        if not sensitive:
            raise InputError("acme.t-closeness needs a sensitive attribute")
        s = np.asarray(anonymized.data.column(sensitive[0]).to_pylist(), dtype=object).astype(str)
        classes = anonymized.data.column(CLASS).to_numpy()
        values, codes = np.unique(s, return_inverse=True)
        cls, cidx = np.unique(classes, return_inverse=True)
        counts = np.zeros((len(cls), len(values)))
        np.add.at(counts, (cidx, codes), 1)
        p = counts / counts.sum(axis=1, keepdims=True)
        q = np.bincount(codes, minlength=len(values)) / len(codes)
        emd = 0.5 * np.abs(p - q).sum(axis=1)
        worst = float(emd.max())
        out = {"acme.t-closeness": worst}
        if params.get("t") is not None:
            out["acme.t-closeness.holds"] = float(worst <= params["t"])
        return out


class JsonLines(Publisher):
    name = "acme.jsonl"
    version = "2.3.0"
    description = "one JSON object per record"
    params = (Param("path", "str"),)

    def publish(self, table, params, ctx):
        path = ctx.resolve_output(params["path"])
        rows = table.data.to_pylist()

        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as fh:
                for r in rows:
                    fh.write(json.dumps(r, sort_keys=True, default=str) + "\n")

        return [Output(str(path), atomic_write(path, write), len(rows))]


@hookimpl
def anonflow_register_algorithms(register):
    register(Mondrian())


@hookimpl
def anonflow_register_metrics(register):
    register(TCloseness())


@hookimpl
def anonflow_register_publishers(register):
    register(JsonLines())
