"""The parameter sweep a run belongs to (the report's ``#sweep`` section and the manifest's
``sweep``): which runs of the store are its points, which metrics every point has, and which
pair of them the trade-off plot shows."""

from __future__ import annotations

from typing import Any, Mapping

from anonflow.api import RunInfo, canonical_json, metric_entries

from .checks import clean_number


#: the rule that picks the runs of a parameter sweep (also shown on the page and in docs/releases.md)
SWEEP_RULE = ("points: this run and the earlier successful runs of the same workflow (same name and same file "
              "content) in the store, the latest run per distinct parameter set; swept parameters: the step "
              "parameters (after --set) and the seed that differ between points; plotted: each pair (utility "
              "metric, privacy or risk metric) of the headline values every point has")



def _sort_key(value: Any) -> tuple:
    if isinstance(value, bool) or value is None:
        return (1, canonical_json(value))
    if isinstance(value, (int, float)):
        return (0, float(value))
    return (1, canonical_json(value))



def headline_metrics(info: RunInfo, registry: Any) -> dict[str, str]:
    """``"<step>.<metric>" -> category`` for the headline value of every metric evaluated."""
    out: dict[str, str] = {}
    for s in info.steps:
        if s["kind"] != "evaluate":
            continue
        for name, _ in metric_entries((s["params"] or {}).get("metrics") or [], where=s["step"]):
            if registry.has("metric", name):
                out[f"{s['step']}.{name}"] = registry.get("metric", name).obj.category
    return out



def sweep(info: RunInfo, registry: Any) -> dict[str, Any] | None:
    """The parameter sweep this run belongs to (see :data:`SWEEP_RULE`), or None."""
    current = {"params": info.params(), "metrics": dict(info.metrics)}
    hidden = {f"{s['step']}.sign" for s in [*info.steps, *([info.current] if info.current else [])]
              if s.get("kind") == "publish" and (s.get("params") or {}).get("publisher") == "release"}
    points = [{**p, "params": {k: v for k, v in (p.get("params") or {}).items() if k not in hidden}}
              for p in [*info.history(), current]]
    if len(points) < 2:
        return None
    common = set.intersection(*(set(p.get("params") or {}) for p in points))
    latest: dict[str, dict[str, Any]] = {}
    for p in points:
        key = canonical_json({k: p["params"][k] for k in sorted(common)})
        latest.pop(key, None)
        latest[key] = p
    pts = list(latest.values())
    varying = sorted(k for k in common if len({canonical_json(p["params"][k]) for p in pts}) > 1)
    if len(pts) < 2 or not varying:
        return None
    cats = headline_metrics(info, registry)
    keys = [k for k in cats if all(isinstance((p.get("metrics") or {}).get(k), (int, float)) for p in pts)]
    pts.sort(key=lambda p: tuple(_sort_key(p["params"][k]) for k in varying))
    return {"rule": SWEEP_RULE, "parameters": varying, "metrics": {k: cats[k] for k in keys},
            "points": [{"params": {k: p["params"][k] for k in varying},
                        "metrics": {k: clean_number(p["metrics"][k]) for k in keys}} for p in pts]}


def tradeoff_pair(sw: Mapping[str, Any], chosen: Any = None) -> tuple[str, str] | str | None:
    """The sweep's headline trade-off, ``(risk, utility)`` keys of ``sw["metrics"]``: the release's
    ``tradeoff`` parameter (``[risk, utility]``, each ``<metric>`` or ``<step>.<metric>``) when
    given, else the first risk measure (else privacy check) and the first utility metric whose
    values differ between the runs (in the order of ``sw["metrics"]``); None without both, a
    sentence when a chosen metric is not in the sweep."""
    metrics = sw["metrics"]
    if chosen:
        keys = []
        for name in chosen:
            match = [k for k in metrics if k == name or k.split(".", 1)[1] == name]
            if not match:
                return (f"The release's tradeoff names {name!r}, which is not a metric every run of the sweep "
                        f"evaluated ({', '.join(metrics)}).")
            keys.append(match[0])
        return keys[0], keys[1]

    def varying(k: str) -> bool:
        return len({canonical_json(p["metrics"][k]) for p in sw["points"]}) > 1

    def first(cats: tuple[str, ...]) -> list[str]:
        ks = [k for k, c in metrics.items() if c in cats]
        return [k for k in ks if varying(k)] or ks

    risk, util = first(("risk",)) or first(("privacy",)), first(("utility",))
    return (risk[0], util[0]) if risk and util else None
