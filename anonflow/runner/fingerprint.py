"""A step's fingerprint: what its cache key is made of, as a typed record (:class:`Fingerprint`).

Two runs of a step with the same fingerprint compute the same table, so the second is served
from the store. The fingerprint covers the step (kind, plugin, version, parameters), its
inputs' content hashes, its seed, the store's schema version and the code that runs it:
anonflow's own and every plugin the step uses (:func:`step_plugins`), so a plugin fixed
without a version bump runs again. Its digest is the sha256 of its canonical JSON; that form
is fixed (recorded fingerprints and cache hits depend on it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..codehash import engine_digest
from ..canonjson import canonical_json
from ..params import relative_paths
from ..registry import Registered, Registry
from ..steps import step_of
from ..store import SCHEMA_VERSION


@dataclass(frozen=True)
class Fingerprint:
    """The fields of a step's cache key. ``params`` are as they count (a publisher's secret
    ones left out, paths to files relative to the workflow's folder, so a moved checkout keeps
    its fingerprints); ``inputs`` the inputs' content hashes (a referenced table's as
    ``name:hash``; a source's: its content digest, its options and its table); ``plugins``
    each plugin's code digest by ``kind:name``."""

    kind: str
    uses: str
    version: str
    params: Mapping[str, Any]
    inputs: tuple[str | None, ...]
    seed: int
    store_schema: int
    engine: str
    plugins: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Any, inputs: list[str | None], seed: int, base: Path, plugins: list[dict[str, str]],
           registry: Registry) -> "Fingerprint":
        """The fingerprint of a plan's ``node`` run with ``inputs`` and ``seed``; ``plugins``
        as the step record keeps them (:func:`step_plugins`, described)."""
        params = step_of(node).fingerprint_params(node, registry)
        return cls(kind=node.kind, uses=node.uses, version=node.version, params=relative_paths(params, base),
                   inputs=tuple(inputs), seed=seed, store_schema=SCHEMA_VERSION, engine=engine_digest(),
                   plugins={f"{p['kind']}:{p['name']}": p["code"] for p in plugins})

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "uses": self.uses, "version": self.version, "params": self.params,
                "inputs": list(self.inputs), "seed": self.seed, "store_schema": self.store_schema,
                "code": {"anonflow": self.engine, "plugins": dict(self.plugins)}}

    def digest(self) -> str:
        """The cache key: sha256 of the canonical JSON of :meth:`to_json`."""
        return hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()


def step_plugins(node: Any, registry: Registry) -> list[Registered]:
    """The plugins whose code a step runs: an algorithm's own plugin and the privacy metrics
    of its claims; and every registered plugin a step's parameters name (keys or values, at
    any depth): an evaluate step's metrics, a publisher, hierarchy builders, the lattice's
    model and utility metrics. A value that merely looks like a plugin's name adds that plugin
    too, which can only make the fingerprint stricter."""
    found: dict[tuple[str, str], Registered] = {}
    if node.plugin is not None:
        found[(node.plugin.kind, node.plugin.name)] = node.plugin
        try:
            claimed = list(node.plugin.obj.claims(node.params) or {})
        except Exception:  # noqa: BLE001 - the run reports a broken claims(); here it only adds names
            claimed = []
        for name in claimed:
            if registry.has("metric", str(name)):
                found[("metric", str(name))] = registry.get("metric", str(name))
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(node.params)
    for reg in registry:
        if reg.name in names and reg.kind != "algorithm":
            found[(reg.kind, reg.name)] = reg
    return [found[k] for k in sorted(found)]
