"""A step's cache key (anonflow.runner.fingerprint.Fingerprint) is the digest the engine
recorded before it was a typed record: recorded fingerprints, and so cache hits of existing
stores, do not change. The pinned digests were computed by the old ``Runner._fingerprint``
(anonflow 29e239a, store schema 6) on the same nodes, with anonflow's code digest fixed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import anonflow.runner.fingerprint as fingerprint_module
from anonflow.runner import Fingerprint, Node

#: what the old code gave for the nodes below (anonflow's code digest "e" * 64, schema 6)
OLD = {
    "algorithm": "a9998fad13876a07daa5b788b077310767cc0e4651866c4c3176c51eeadd2f86",
    "publish": "9a822b175e11dfa2590e082d2aac08cb5e56c53df180cd6b6d06ffcdeadc0f98",
    "source": "d43e423ded49040e05b3583cc6fc265c3fdfeffcf268b78f457fa3a97e224086",
}


class _Publisher:
    secret_params = ("signing_key",)
    outputs = ("path",)


class _Registered:
    obj = _Publisher()


class _Registry:
    """A registry holding only the ``release`` publisher (whose signing key is secret)."""

    def has(self, kind: str, name: str) -> bool:
        return (kind, name) == ("publisher", "release")

    def get(self, kind: str, name: str, where: str | None = None) -> _Registered:
        return _Registered()


def _cases(base: Path) -> dict:
    return {
        "algorithm": (Node(name="anon", kind="algorithm", uses="mdav", inputs=("typed",), version="1.2.3",
                           params={"k": 5, "hierarchy": str(base / "h.csv"), "weights": [1, 2.5], "name": "é"}),
                      ["a" * 64, "pop:" + "b" * 64], 42,
                      [{"kind": "algorithm", "name": "mdav", "code": "c" * 64},
                       {"kind": "metric", "name": "k-anonymity", "code": "d" * 64}]),
        "publish": (Node(name="out", kind="publish", uses="publish", inputs=("anon",), version="0.9",
                         params={"publisher": "release", "path": "out/r", "signing_key": "s3cret", "row_id": False}),
                    ["f" * 64], 7, [{"kind": "publisher", "name": "release", "code": "9" * 64}]),
        "source": (Node(name="adult", kind="source", uses="csv", params={}, version="0.9"),
                   ["1" * 64, '{"delimiter":","}', None], 3, []),
    }


@pytest.mark.parametrize("kind", sorted(OLD))
def test_a_fingerprint_digests_as_the_old_code_did(kind, tmp_path, monkeypatch):
    (tmp_path / "h.csv").write_text("x\n")  # an existing file named by absolute path counts relative to the folder
    monkeypatch.setattr(fingerprint_module, "engine_digest", lambda: "e" * 64)
    node, inputs, seed, plugins = _cases(tmp_path)[kind]
    fp = Fingerprint.of(node, inputs, seed, tmp_path, plugins, _Registry())
    assert dataclasses.replace(fp, store_schema=6).digest() == OLD[kind]


def test_a_fingerprint_is_a_typed_record(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint_module, "engine_digest", lambda: "e" * 64)
    node, inputs, seed, plugins = _cases(tmp_path)["publish"]
    fp = Fingerprint.of(node, inputs, seed, tmp_path, plugins, _Registry())
    assert "signing_key" not in fp.params  # a publisher's secret parameters never count (nor are recorded)
    assert fp.inputs == ("f" * 64,) and fp.plugins == {"publisher:release": "9" * 64} and fp.engine == "e" * 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        fp.seed = 8  # type: ignore[misc]
    assert dataclasses.replace(fp, seed=8).digest() != fp.digest()
