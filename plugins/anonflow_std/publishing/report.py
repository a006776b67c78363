"""The release report: one self-contained HTML page about a run (``report.html``).

The page is a pure function of the run's record (:class:`anonflow.api.RunInfo`) and the
stored tables: the ``release`` publisher writes it into the release directory and
``anonflow report RUN_ID`` renders the same page from the store. It holds no timestamps,
run ids or absolute paths, and its plots are inline SVG drawn with matplotlib (Agg canvas,
``svg.hashsalt`` fixed, no date metadata), so the same run gives the same bytes.

Sections: privacy guarantees and their check results, disclosure risk (when the run measured a
risk metric: each risk value before and after, the records at risk, and a histogram of
record-level prosecutor risk of the original and the published table), the class-size distribution,
per-attribute information loss, the metrics with their thresholds, utility vs risk across a
parameter sweep (when the store holds one), and the run's lineage graph.

This module builds the page and computes what it shows: class sizes, per-attribute loss and
the lineage graph; the parameter sweep (which the release manifest records too) is
:mod:`.report_sweep`, the plots :mod:`.report_plots`. Which privacy checks apply to the released table, and running them, is
:mod:`anonflow_std.publishing.checks`; ``anonflow verify`` is :mod:`anonflow_std.publishing.verify`.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

import numpy as np

from anonflow.api import (CLASS, ROW, InputError, PurgedError, RunError, RunInfo, TypedTable, better_direction,
                          canonical_json, metric_entries, sql_ident)

from .. import __version__
from ..common.wildcard import compatible_counts_query, pattern_sql
from .checks import planned_checks, run_check, scratch_context
from .lossy_join import K_MEANING, k_figures
from .manifest import perturbation_text, perturbations, public_overrides
from .report_plots import (class_size_plot, lineage_graph, lineage_plot, loss_plot, pareto_front, risk_plot, sweep_plot,
                           tradeoff_plot)
from .report_sweep import SWEEP_RULE, sweep, tradeoff_pair

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:70rem;
padding:1rem 2rem;color:#1d232b;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.25rem;border-bottom:1px solid #d5dbe1;padding-bottom:.2rem;
margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #d5dbe1;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f2f5f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.85rem;background:#f2f5f8;padding:0 .2rem;border-radius:3px;overflow-wrap:break-word}
.pass{color:#17692c;font-weight:600}.fail{color:#b0201c;font-weight:600}.none{color:#68737d}
.plot svg{max-width:100%;height:auto}nav a{margin-right:1rem}p.note{color:#4a545e;font-size:.9rem}
"""


# -- small helpers -----------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any) -> str:
    if value is None:
        return "&ndash;"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return _e(value)
    if math.isnan(v):
        return "NaN"
    return _e(f"{v:.6g}")


def _verdict(value: bool | None) -> str:
    if value is None:
        return '<span class="none">&ndash;</span>'
    return '<span class="pass">pass</span>' if value else '<span class="fail">FAIL</span>'


def params_text(params: Mapping[str, Any] | None) -> str:
    shown = {k: v for k, v in (params or {}).items() if v is not None}
    return ", ".join(f"{k}={canonical_json(v)}" for k, v in sorted(shown.items())) or "defaults"


def shown_params(s: Mapping[str, Any]) -> dict[str, Any]:
    """A step's parameters as the page shows them: a release's ``sign`` (the private key's
    path) is never shown."""
    params = dict(s.get("params") or {})
    if s.get("kind") == "publish" and params.get("publisher") == "release":
        params.pop("sign", None)
    return params


# -- what the page is about --------------------------------------------------------------


def released_step(info: RunInfo) -> dict[str, Any] | None:
    """The step whose output the page reports on: the input of the step being run (the
    release), else of the last publish step, else the last algorithm step."""
    if info.current is not None and info.current.get("inputs"):
        rec = info.step(info.current["inputs"][0]["name"])
        if rec is not None:
            return rec
    for kind in ("publish", "algorithm"):
        recs = [s for s in info.steps if s["kind"] == kind and s["status"] != "failed"]
        if recs:
            rec = recs[-1]
            if kind == "publish":
                rec = info.step((rec["inputs"] or [{}])[0].get("name", ""))
            if rec is not None and rec.get("output_table"):
                return rec
    return None


def _chain_origins(info: RunInfo, released: dict[str, Any] | None) -> tuple[dict[str, Any] | None,
                                                                            dict[str, Any] | None]:
    """Walking up first inputs from ``released``: the typing step's output, and the input of
    the first algorithm of the chain (the earliest met)."""
    rec, typed, first_input = released, None, None
    seen: set[str] = set()
    while rec is not None and rec["kind"] != "source" and rec["step"] not in seen:
        seen.add(rec["step"])
        parent = info.step((rec["inputs"] or [{}])[0].get("name", "")) if rec.get("inputs") else None
        if rec["kind"] == "typing":
            typed = rec
            break
        if rec["kind"] == "algorithm" and parent is not None:
            first_input = parent
        rec = parent
    return typed, first_input


def original_step(info: RunInfo, released: dict[str, Any] | None) -> dict[str, Any] | None:
    """The original table ``released`` was made from, which the per-attribute loss compares
    it with: the typing step's output (what any chain of algorithms started from), else the
    input of the first algorithm of the chain."""
    typed, first_input = _chain_origins(info, released)
    if first_input is None:
        return None  # no algorithm made the released table
    return typed or first_input


def chain_input(info: RunInfo, released: dict[str, Any] | None) -> dict[str, Any] | None:
    """The input of the first algorithm of the chain that made ``released`` (the records as
    they were before any anonymization, after filters and samples)."""
    return _chain_origins(info, released)[1]


def release_params(info: RunInfo) -> Mapping[str, Any]:
    """The parameters of the release the page belongs to: the step being run, else the run's
    last ``release`` publish step (``anonflow report RUN_ID``); {} without one."""
    steps = [*info.steps, *([info.current] if info.current is not None else [])]
    pubs = [s for s in steps if s.get("kind") == "publish" and (s.get("params") or {}).get("publisher") == "release"]
    return (pubs[-1].get("params") or {}) if pubs else {}


def layout_of(info: RunInfo) -> str:
    """``lossy-join`` when the page's publication is Anatomy-style, else ``table``."""
    if info.current is not None and info.current.get("kind") == "publish":
        p = info.current.get("params") or {}
        if p.get("publisher") == "lossy-join" or p.get("layout") == "lossy-join":
            return "lossy-join"
        return "table"
    pubs = [s for s in info.steps if s["kind"] == "publish"]
    if pubs and (pubs[-1]["params"] or {}).get("publisher") == "lossy-join":
        return "lossy-join"
    return "table"


# -- the sweep ----------------------------------------------------------------------------


def sweep_section(sw: Mapping[str, Any] | None, registry: Any, chosen: Any = None) -> str:
    """The sweep's table (the runs on the Pareto frontier of the headline pair marked), the
    headline trade-off plot (:func:`tradeoff_pair`) and, folded, every pair of a utility and a
    risk metric."""
    if not sw or not sw["metrics"]:
        return "<p>No parameter sweep: the store holds no other run of this workflow with other parameters.</p>"
    sw = {**sw, "better": {k: better_direction(registry.get("metric", k.split(".", 1)[1]).obj) for k in sw["metrics"]}}
    pair = tradeoff_pair(sw, chosen)
    problem = pair if isinstance(pair, str) else None
    pair = None if problem else pair
    front = (pareto_front([p["metrics"][pair[0]] for p in sw["points"]], [p["metrics"][pair[1]] for p in sw["points"]],
                          sw["better"][pair[0]] == "higher", sw["better"][pair[1]] == "higher")
             if pair else [False] * len(sw["points"]))
    prow = [[_e(canonical_json(p["params"][k])) for k in sw["parameters"]] + [_num(p["metrics"][m]) for m in sw["metrics"]]
            + (["yes" if f else ""] if pair else []) for p, f in zip(sw["points"], front)]
    n = len(sw["parameters"])
    head = [*sw["parameters"], *sw["metrics"], *(["on the frontier"] if pair else [])]
    body = _table(head, prow, numeric=set(range(n, n + len(sw["metrics"]))))
    if problem:
        body += f'<p class="note">{_e(problem)}</p>'
    if pair:
        how = ("the release's <code>tradeoff</code>" if chosen else
               "the first risk measure and the first utility metric whose values differ between the runs; "
               "the release's <code>tradeoff: [risk, utility]</code> chooses others")
        body += (f'<p id="tradeoff">Each run of the sweep at its <code>{_e(pair[0])}</code> '
                 f"({_e(sw['better'][pair[0]])} is better) and its <code>{_e(pair[1])}</code> "
                 f"({_e(sw['better'][pair[1]])} is better): {how}. A run is on the Pareto frontier when no other "
                 "run is at least as good on both and better on one.</p>" + tradeoff_plot(sw, *pair))
    return body + "<details><summary>Every pair of a utility metric and a risk measure</summary>" + sweep_plot(sw) + "</details>"


# -- computations on the released table ----------------------------------------------------


def class_sizes(table: TypedTable, sql: Any) -> np.ndarray:
    """Records per class: by ``_class`` when present, else by the published QI values."""
    data = table.data
    if CLASS in data.column_names:
        cls = data.column(CLASS)
        rows = sql(f"SELECT count(*) AS n FROM t WHERE {sql_ident(CLASS)} IS NOT NULL GROUP BY {sql_ident(CLASS)} "
                   "ORDER BY n", t=data.select([CLASS])) if cls.null_count < len(cls) else None
    else:
        quasi = [q for q in table.typing.quasi if q in data.column_names]
        if not quasi:
            return np.zeros(0, dtype=np.int64)
        group = ", ".join(sql_ident(q) for q in quasi)
        rows = sql(f"SELECT count(*) AS n FROM t GROUP BY {group} ORDER BY n", t=data.select(quasi))
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(rows.column("n").to_numpy(zero_copy_only=False), dtype=np.int64)


def attribute_loss(original: TypedTable, released: TypedTable, sql: Any, layout: str,
                   also: Any = (), random: Any = ()) -> list[dict[str, Any]]:
    """Per-attribute information loss, computed generically from original vs published values,
    for every quasi-identifier and each column of ``also`` (the other columns a perturbation
    of the release's lineage changed: PRAMed or noised insensitive columns), in that order.

    * ``ambiguity`` (every quasi-identifier): each record's published value stands for the
      distinct original values of the records published with that value; the loss is
      (that number - 1) / (distinct original values - 1), averaged over records: 0 when
      every published value identifies its original value, 1 when all are merged into one.
      Not for a column of ``random`` (changed at random: PRAM, noise, swapping), where a few
      records moved from each value make every published value stand for many original ones
      (None: the share of records changed and the SSE say more).
    * ``sse_share`` and ``il`` (attributes numeric in both tables): the attribute's
      share of the total squared error on z-scored values, and 100 * SSE_j / SST_j.
    * lossy-join layout: for the sensitive attribute, the share of a record's class that
      holds another sensitive value, mean over records (the QIs are published exactly).
    """
    odata, rdata = original.data, released.data
    out: list[dict[str, Any]] = []
    if ROW not in odata.column_names or ROW not in rdata.column_names:
        return out
    quasi = [q for q in [*released.typing.quasi, *[a for a in also if a not in released.typing.quasi]]
             if q in odata.column_names and q in rdata.column_names]
    # one join of the two tables, then per attribute: distinct original values (d), the sum over
    # published values of records * (distinct originals - 1) (s), records (n), changed values
    pairs = ", ".join(f"CAST(o.{sql_ident(q)} AS VARCHAR) AS o{i}, CAST(p.{sql_ident(q)} AS VARCHAR) AS p{i}"
                      for i, q in enumerate(quasi))
    per_attribute = " UNION ALL ".join(
        f"""SELECT {i} AS i, (SELECT count(DISTINCT o{i}) FROM j) AS d,
                   (SELECT sum(n * (a - 1)) FROM (SELECT count(DISTINCT o{i}) AS a, count(*) AS n FROM j GROUP BY p{i})) AS s,
                   (SELECT count(*) FROM j) AS n, (SELECT count(*) FROM j WHERE o{i} IS DISTINCT FROM p{i}) AS changed"""
        for i in range(len(quasi)))
    rows = sql(f"WITH j AS MATERIALIZED (SELECT {pairs} FROM orig o JOIN pub p USING ({sql_ident(ROW)})) "
               f"SELECT * FROM ({per_attribute}) ORDER BY i",
               orig=odata.select([ROW, *quasi]), pub=rdata.select([ROW, *quasi])).to_pylist() if quasi else []
    for q, row in zip(quasi, rows):
        d, n = int(row["d"] or 0), int(row["n"] or 0)
        amb = float(row["s"] or 0) / (n * (d - 1)) if n and d > 1 else 0.0
        role = released.typing.get(q).role if q in released.typing else "quasi"
        out.append({"attribute": q, "role": role, "ambiguity": None if q in random else amb,
                    "changed": float(row["changed"] or 0) / n if n else 0.0, "sse": None, "il": None})
    numeric = []
    for rec in out:
        q = rec["attribute"]
        attr = original.typing.get(q) if q in original.typing else None
        # a quasi-identifier typed continuous; another column (perturbed) of numbers not typed categorical
        if attr is None or (attr.type != "continuous" if attr.role == "quasi" else attr.type in ("nominal", "ordinal")):
            continue
        import pyarrow as pa

        if not (pa.types.is_integer(rdata.column(q).type) or pa.types.is_floating(rdata.column(q).type)):
            continue
        numeric.append(rec)
    if numeric:
        select = ", ".join("o.{0} AS {1}, p.{0} AS {2}".format(sql_ident(r["attribute"]), sql_ident("o_" + r["attribute"]),
                                                               sql_ident("p_" + r["attribute"])) for r in numeric)
        joined = sql(f"SELECT {select} FROM orig o JOIN pub p USING ({sql_ident(ROW)}) ORDER BY {sql_ident(ROW)}",
                     orig=odata.select([ROW, *[r["attribute"] for r in numeric]]),
                     pub=rdata.select([ROW, *[r["attribute"] for r in numeric]]))
        total = 0.0
        for r in numeric:
            xo = joined.column("o_" + r["attribute"]).to_numpy(zero_copy_only=False).astype(np.float64)
            xp = joined.column("p_" + r["attribute"]).to_numpy(zero_copy_only=False).astype(np.float64)
            sd = float(xo.std()) or 1.0
            z = (xo - xo.mean()) / sd
            sse = float(np.sum(((xo - xp) / sd) ** 2))
            sst = float(np.sum(z * z))
            r["sse"], r["il"] = sse, (100.0 * sse / sst if sst > 0 else 0.0)
            total += sse
        for r in numeric:
            r["sse_share"] = r["sse"] / total if total > 0 else 0.0
    if layout == "lossy-join" and CLASS in rdata.column_names:
        for s in released.typing.sensitive:
            if s not in rdata.column_names:
                continue
            row = sql(f"""
                WITH c AS (SELECT {sql_ident(CLASS)} AS cls, CAST({sql_ident(s)} AS VARCHAR) AS v, count(*) AS c
                           FROM pub WHERE {sql_ident(CLASS)} IS NOT NULL GROUP BY cls, v),
                     n AS (SELECT cls, sum(c) AS n FROM c GROUP BY cls)
                SELECT sum(c.c * (1 - c.c / n.n) ORDER BY cls, v) AS s, sum(c.c) AS n FROM c JOIN n USING (cls)
            """, pub=rdata.select([CLASS, s])).to_pylist()[0]
            n = float(row["n"] or 0)
            out.append({"attribute": s, "role": "sensitive", "ambiguity": float(row["s"] or 0) / n if n else 0.0,
                        "changed": None, "sse": None, "il": None})
    return out


# -- plots ----------------------------------------------------------------------------------


# -- disclosure risk ------------------------------------------------------------------------

#: the fixed bins of record-level prosecutor risk 1/f (f: the record's class size over the QIs):
#: (label, smallest f, largest f or None). Bounds are on the integer class size, so a class of
#: 3 (risk 1/3) falls in (1/5, 1/3] exactly, with no float rounding.
RISK_BINS = (("(0, 1/20]", 20, None), ("(1/20, 1/10]", 10, 19), ("(1/10, 1/5]", 5, 9), ("(1/5, 1/3]", 3, 4),
             ("(1/3, 1/2]", 2, 2), ("(1/2, 1]", 1, 1))
#: the values of the risk metrics that count records at risk (shown apart on the page)
AT_RISK_DETAILS = ("records_at_risk", "uniques")


def risk_metrics(info: RunInfo, registry: Any) -> list[dict[str, Any]]:
    """The risk metrics the run measured: per evaluate step, each metric of category ``risk``
    (by the registry, or, for a plugin no longer installed, by its recorded ``.before`` value),
    ``{"step", "metric", "risk_before", "rows": [{"value", "after", "before"}]}`` -- ``value`` is
    the headline (the metric's name) or ``<metric>.<detail>``; ``after`` is the value measured on
    the evaluated (anonymized) table, ``before`` the one ``risk_before`` measured on the original
    (None when not measured). Rows keep the order of the run's metric values."""
    out = []
    for s in info.steps:
        if s["kind"] != "evaluate" or s["status"] == "failed":
            continue
        params = s.get("params") or {}
        for name, _ in metric_entries(params.get("metrics") or [], where=s["step"]):
            prefix = f"{s['step']}.{name}"
            if registry.has("metric", name):
                is_risk = registry.get("metric", name).obj.category == "risk"
            else:
                is_risk = f"{prefix}.before" in info.metrics
            if not is_risk:
                continue
            rows: dict[str, dict[str, Any]] = {}
            for key, value in info.metrics.items():
                if key != prefix and not key.startswith(prefix + "."):
                    continue
                suffix = key[len(prefix):]
                before = suffix == ".before" or suffix.startswith(".before.")
                vname = name + (suffix[len(".before"):] if before else suffix)
                row = rows.setdefault(vname, {"value": vname, "after": None, "before": None})
                row["before" if before else "after"] = value
            if rows:
                out.append({"step": s["step"], "metric": name, "risk_before": bool(params.get("risk_before")),
                            "evaluated": ((s.get("inputs") or [{}])[-1]).get("name"), "rows": list(rows.values())})
    return out


def risk_histogram(table: TypedTable, quasi: list[str], sql: Any) -> dict[str, Any]:
    """Records per bin of :data:`RISK_BINS` of record-level prosecutor risk 1/f, f the record's
    class size over ``quasi`` computed in DuckDB; a null QI cell (a suppressed cell) matches any
    value (:mod:`anonflow_std.common.wildcard`: f is then the record's compatible count).
    ``{"counts", "records", "with_null", "note"}``."""
    cols = [q for q in quasi if q in table.columns]
    data = table.data.select(cols)
    n = data.num_rows
    if not cols or n == 0:  # no quasi-identifier: every record's class is the whole table
        return {"counts": [n if n and lo <= n and (hi is None or n <= hi) else 0 for _, lo, hi in RISK_BINS],
                "records": n, "with_null": 0, "note": None}
    any_null = " OR ".join(f"{sql_ident(c)} IS NULL" for c in cols)
    with_null = int(sql(f"SELECT count(*) AS n FROM t WHERE {any_null}", t=data).column("n")[0].as_py() or 0)
    note = None
    source = ("SELECT count(*)::BIGINT AS _af_n, count(*)::BIGINT AS _af_compatible FROM t GROUP BY "
              + ", ".join(sql_ident(c) for c in cols))
    if with_null:
        try:
            pats = sql(f"SELECT DISTINCT {pattern_sql(cols)} AS p FROM t ORDER BY p", t=data)
            source = compatible_counts_query(cols, [int(p) for p in pats.column("p").to_pylist()])
        except (InputError, RunError) as exc:
            note = (f"{with_null} record(s) have a suppressed (null) quasi-identifier cell; they could not be counted "
                    f"as wildcards ({exc}), so a null counts here as a value of its own")
    sel = ", ".join(f"coalesce(sum(_af_n) FILTER (WHERE _af_compatible >= {lo}"
                    + (f" AND _af_compatible <= {hi}" if hi is not None else "") + f"), 0)::BIGINT AS b{i}"
                    for i, (_, lo, hi) in enumerate(RISK_BINS))
    row = sql(f"WITH c AS ({source}) SELECT {sel} FROM c", t=data).to_pylist()[0]
    return {"counts": [int(row[f"b{i}"]) for i in range(len(RISK_BINS))], "records": n, "with_null": with_null,
            "note": note}


def risk_original(info: RunInfo, released: dict[str, Any] | None) -> dict[str, Any] | None:
    """The table the risk "before" is read from: the first input of the first evaluate step
    that measured risk on two inputs, else the input of the first algorithm of the chain that
    produced the released table (:func:`chain_input`)."""
    for s in info.steps:
        if s["kind"] == "evaluate" and s["status"] != "failed" and len(s.get("inputs") or []) >= 2 \
                and (s.get("params") or {}).get("risk_before"):
            rec = info.step(s["inputs"][0].get("name", ""))
            if rec is not None and rec.get("output_table"):
                return rec
    return chain_input(info, released)


def _at_risk_text(value: Any, records: Any, share: bool) -> str:
    """A records-at-risk value; a share also as a number of records (share x records)."""
    if value is None:
        return "&ndash;"
    if share and records is not None:
        return f"{_num(value)} ({_num(round(float(value) * float(records)))} of {_num(records)} records)"
    return _num(value)


def risk_section(info: RunInfo, registry: Any, released: dict[str, Any] | None, table: TypedTable | None) -> str:
    """The ``#risk`` section, or "" when the run measured no risk metric."""
    measured = risk_metrics(info, registry)
    if not measured:
        return ""
    parts = ['<section id="risk"><h2>Disclosure risk</h2>']
    rows, at_risk = [], []
    for m in measured:
        for r in m["rows"]:
            key = f"{m['step']}.{r['value']}"
            th = info.thresholds.get(key)
            ttext = ", ".join(f"{k} {v:g}" for k, v in sorted(th.items())) if th else ""
            on = f" on <code>{_e(m['evaluated'])}</code>" if m.get("evaluated") else ""
            rows.append([f"<code>{_e(m['step'])}</code>{on}", f"<code>{_e(r['value'])}</code>", _num(r["before"]),
                         _num(r["after"]), _e(ttext)])
            if r["value"].rsplit(".", 1)[-1] in AT_RISK_DETAILS:
                at_risk.append((m, r))
    parts.append('<p class="note">Every risk metric (category <code>risk</code>) of the evaluate steps: '
                 "<em>after</em> is measured on the evaluated (anonymized) table, <em>before</em> on the original "
                 "as if it were published unchanged (the evaluate step's <code>risk_before: true</code>; "
                 "&ndash; where it was not measured).</p>")
    parts.append(_table(["step", "value", "before", "after", "threshold"], rows, numeric={2, 3}))
    if at_risk:
        arows = []
        for m, r in at_risk:
            by_value = {x["value"]: x for x in m["rows"]}
            recs = by_value.get(f"{m['metric']}.records", {})
            thr = by_value.get(f"{m['metric']}.threshold", {})
            share = r["value"].endswith("records_at_risk")
            if share:
                what = "share of records at risk" + (f" (risk 1/class size &gt; {_num(thr['after'])})"
                                                     if thr.get("after") is not None else "")
            elif m["metric"] == "population-uniqueness":
                what = "estimated population-unique records"
            else:
                what = "sample-unique records"
            arows.append([f"<code>{_e(m['step'])}.{_e(r['value'])}</code>", what,
                          _at_risk_text(r["before"], recs.get("before"), share),
                          _at_risk_text(r["after"], recs.get("after"), share)])
        parts.append('<h3 id="records-at-risk">Records at risk</h3>'
                     + _table(["value", "meaning", "before", "after"], arows))
    # the histogram of record-level prosecutor risk, original vs published
    original = risk_original(info, released)
    series: list[tuple[str, list[int], str]] = []
    hrows, notes = [], []
    quasi = list(table.typing.quasi) if table is not None else []
    for label, rec, tbl, color in (("original", original, None, "#a8553b"), ("published", released, table, "#3b6ea8")):
        if tbl is None and rec is not None and rec.get("output_table"):
            try:
                tbl = info.load(rec["output_table"])
            except PurgedError:
                notes.append(f"{label}: the table was purged from the store (anonflow purge); not shown")
                continue
        if tbl is None or rec is None:
            continue
        h = risk_histogram(tbl, quasi or list(tbl.typing.quasi), info.sql)
        series.append((f"{label} ({rec['step']})", h["counts"], color))
        hrows.append((f"{label} (<code>{_e(rec['step'])}</code>)", h))
        if h["with_null"] and h["note"] is None:
            notes.append(f"{label}: {h['with_null']} record(s) with a suppressed (null) quasi-identifier cell, "
                         "counted as wildcards: f is the record's compatible count")
        elif h["note"]:
            notes.append(f"{label}: {h['note']}")
    if series:
        labels = [b[0] for b in RISK_BINS]
        trs = [[name] + [_num(c) for c in h["counts"]] + [_num(h["records"])] for name, h in hrows]
        parts.append('<h3 id="risk-histogram">Record-level risk, before and after</h3>'
                     '<p class="note">Each record\'s prosecutor risk is 1 / f, f the number of records of its '
                     "class (equal values on every quasi-identifier"
                     + (": " + ", ".join(f"<code>{_e(q)}</code>" for q in quasi) if quasi else "")
                     + "), counted in DuckDB on the stored tables: the original (the evaluate step's first input, "
                     "else the input of the algorithm that produced the published table) and the published table. "
                     "A suppressed (null) cell matches any value. Fixed bins (lower bound excluded): "
                     + ", ".join(labels) + ".</p>"
                     + _table(["table", *labels, "records"], trs, numeric=set(range(1, len(labels) + 2)))
                     + risk_plot(labels, series)
                     + "".join(f'<p class="note">{_e(n)}.</p>' for n in notes))
    parts.append("</section>")
    return "".join(parts)


# -- the page ---------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


#: what differential privacy protects and what it does not, as the report states it
DP_MEANING = ("What it protects: whatever an attacker knows besides, what these steps released changes how "
              "likely any fact about one record of their input table (whether it is there, its values) looks by a "
              "factor of at most e^ε (plus δ; under ρ-zCDP, ε = ρ + 2√(ρ ln(1/δ)) for any δ), the neighbouring "
              "tables differing by one record added or removed. What it does not protect: facts about groups "
              "(patterns a release is made to show), a person whose data sit in several records, anything a step "
              "not listed here published (protected by its own model only), the figures this report and the "
              "manifest compute from the exact records (record counts, metrics, notes: outside the guarantee, so "
              "keep them with the custodian where it must cover everything published), and more than the stated "
              "loss when the same data are released again: losses add up")
#: how a DP step's randomness bears on its guarantee: seeded (SafePub) or OpenDP's sampler
SEEDED = ("its random draws come from the run's seed, which the manifest records so that <code>anonflow verify "
          "--rerun</code> reproduces them: the guarantee holds against whoever cannot redo them, so keep the seed "
          "from those the release protects against")
NOISED = ("its noise comes from OpenDP's cryptographically safe sampler (basic composition over its queries): the "
          "noised values are not reproducible, and <code>anonflow verify --rerun</code> compares all but them")
DP_SYMBOLS = {"epsilon": "ε", "delta": "δ", "rho": "ρ"}
DP_MEASURES = {"pure": "pure ε-DP", "approximate": "(ε, δ)-DP", "zcdp": "ρ-zCDP"}


def privacy_loss_text(loss: Mapping[str, Any]) -> str:
    """``ε = 1 (pure ε-DP); mechanism discrete Laplace, queries 3`` for a step's privacy loss."""
    figures = ", ".join(f"{DP_SYMBOLS[k]} = {_num(loss[k])}" for k in ("epsilon", "delta", "rho") if k in loss)
    rest = ", ".join(f"{k} {v if isinstance(v, str) else canonical_json(v)}" for k, v in loss.items()
                     if k not in ("measure", "epsilon", "delta", "rho"))
    measure = DP_MEASURES.get(str(loss.get("measure")), loss.get("measure"))
    return f"{figures} ({measure})" + (f"; {rest}" if rest else "")


def _query_text(q: Mapping[str, Any]) -> str:
    cols = ", ".join(map(str, q.get("columns") or []))
    parts = [f"{q.get('query')} of {cols}"]
    if q.get("bounds") is not None:
        parts.append(f"bounds {canonical_json(q['bounds'])} (values clamped), grid {_num(q.get('resolution'))}")
    parts.append(f"sensitivity {_num(q.get('sensitivity'))}" + (f" (count: {_num(q['count_sensitivity'])})"
                                                                 if q.get("count_sensitivity") is not None else ""))
    parts.append(f"noise scale {_num(q.get('scale'))}" + (f" (count: {_num(q['count_scale'])})"
                                                          if q.get("count_scale") is not None else ""))
    parts += [f"{DP_SYMBOLS[k]} {_num(q[k])}" for k in ("epsilon", "rho") if k in q]
    return ", ".join(parts)


def dp_steps(info: RunInfo, registry: Any) -> list[dict[str, Any]]:
    """The run's steps that spent a differential-privacy budget: ``{"step", "uses", "version",
    "loss", "queries"}``; the loss as the engine recorded it (``summary.privacy_loss``), else as
    the plugin declares it for the step's parameters; the queries a step recorded it released
    (``summary.fitted.dp_release``: file -> its queries)."""
    out = []
    for s in info.steps:
        summary = s.get("summary") if isinstance(s.get("summary"), Mapping) else {}
        loss = summary.get("privacy_loss")
        kind = {"algorithm": "algorithm", "publish": "publisher"}.get(s.get("kind"))
        name = (s.get("params") or {}).get("publisher") if kind == "publisher" else s.get("uses")
        if loss is None and kind and registry is not None and isinstance(name, str) and registry.has(kind, name):
            try:
                loss = registry.get(kind, name).obj.privacy_loss(s.get("params") or {})
            except Exception:  # noqa: BLE001 - a declaration that cannot be worked out is not shown
                loss = None
        released = (summary.get("fitted") or {}).get("dp_release") if isinstance(summary.get("fitted"), Mapping) \
            else None
        queries = []
        for entry in (released.values() if isinstance(released, Mapping) else []):
            qs = entry.get("queries") if isinstance(entry, Mapping) else None
            queries += [q for q in (qs if isinstance(qs, list) else [qs]) if isinstance(q, Mapping)]
        if isinstance(loss, Mapping) and loss:
            seeded = bool(registry.get(kind, name).obj.reproducible) if (
                kind and registry is not None and isinstance(name, str) and registry.has(kind, name)) else True
            out.append({"step": s["step"], "uses": name or s.get("uses"), "version": s.get("plugin_version"),
                        "loss": dict(loss), "queries": queries, "seeded": seeded})
    return out


def dp_paragraph(info: RunInfo, registry: Any) -> str:
    """The "Differential privacy" paragraph of the privacy section, or "" when no step spent a budget."""
    steps = dp_steps(info, registry)
    if not steps:
        return ""
    items = "".join(f"<li><code>{_e(d['step'])}</code> ({_e(d['uses'])} {_e(d['version'])}): "
                    f"{_e(privacy_loss_text(d['loss']))}; "
                    + (SEEDED if d["seeded"] else NOISED)
                    + ("<ul>" + "".join(f"<li>{_e(_query_text(q))}</li>" for q in d["queries"]) + "</ul>"
                       if d["queries"] else "") + "</li>" for d in steps)
    return ('<p id="differential-privacy"><strong>Differential privacy.</strong> These steps state the loss they '
            f"spent on their input table:</p><ul>{items}</ul>"
            f'<p class="note">{_e(DP_MEANING)}.</p>')


def _suppressed_text(step: Mapping[str, Any]) -> str:
    """``; 12 suppressed (cap 54)`` for a step that may suppress records, else nothing."""
    summary = step.get("summary") or {}
    if summary.get("suppressed") is None:
        return ""
    cap = summary.get("suppression_limit")
    return f"; {_e(summary['suppressed'])} suppressed" + (f" (cap {_e(cap)})" if cap is not None else "")


def render(info: RunInfo, registry: Any) -> str:
    """The report page of ``info`` (see the module docstring)."""
    run = info.run
    released = released_step(info)
    original = original_step(info, released)
    layout = layout_of(info)
    table = info.load(released["output_table"]) if released and released.get("output_table") else None
    orig_table, purged = None, False
    if original and original.get("output_table"):
        try:
            orig_table = info.load(original["output_table"])
        except PurgedError:  # the store no longer holds the original (anonflow purge): what needs it is left out
            purged = True
    wf_file = str(run.get("workflow_path") or "").replace("\\", "/").rsplit("/", 1)[-1]
    parts: list[str] = []

    # header
    overrides = public_overrides(info)
    parts.append(f"<header><h1>Release report: {_e(run['workflow'])}</h1>"
                 f"<p>Workflow file <code>{_e(wf_file)}</code> (sha256 <code>{_e(run['workflow_hash'])}</code>), "
                 f"seed {_e(run['seed'])}"
                 + (", parameters set on the command line: " + ", ".join(
                     f"<code>{_e(s)}.{_e(p)}={_e(canonical_json(v))}</code>" for s, p, v in overrides) if overrides else "")
                 + ". Published step: "
                 + (f"<code>{_e(released['step'])}</code> ({_e(released['uses'])}, {_e(released['rows'])} records"
                    + _suppressed_text(released) + ")" if released else "none")
                 + f"; layout: {_e(layout)}.</p></header>")
    risk = risk_section(info, registry, released, table)
    parts.append('<nav><a href="#privacy">Privacy</a>' + ('<a href="#risk">Risk</a>' if risk else "")
                 + '<a href="#classes">Class sizes</a><a href="#loss">Information '
                 'loss</a><a href="#metrics">Metrics</a><a href="#sweep">Sweep</a><a href="#lineage">Lineage</a></nav>')

    # privacy guarantees
    claims = table.claims if table is not None else {}
    checks = planned_checks(info, released, claims, registry)
    rows = []
    ctx = scratch_context(info.sql, info.workflow_dir, "report")
    for c in checks:
        prefix = f"{c['evaluated']}.{c['check']}" if c["evaluated"] else None
        if prefix:
            result = {k[len(c['evaluated']) + 1:]: v for k, v in info.metrics.items()
                      if k == prefix or k.startswith(prefix + ".")}
            origin = f"evaluate step <code>{_e(c['evaluated'])}</code>"
        else:
            try:
                result = run_check(c, table, registry, ctx)
                origin = "the algorithm's claim (checked here on the stored table)"
            except InputError as exc:
                result, origin = {}, f"the algorithm's claim (cannot be checked: {_e(exc)})"
        holds = result.get(f"{c['check']}.holds")
        detail = ", ".join(f"{_e(k)} = {_num(v)}" for k, v in result.items() if k != f"{c['check']}.holds")
        rows.append([f"<code>{_e(c['check'])}</code>", _e(params_text(c["params"])), origin, detail,
                     _verdict(None if holds is None else holds == 1.0)])
    claim_text = "; ".join(f"<code>{_e(k)}</code> {_e(params_text(v))}" for k, v in sorted(claims.items()))
    kfig = ""
    if layout == "lossy-join" and table is not None and CLASS in table.columns:
        ks = k_figures(table.data.select([*[q for q in table.typing.quasi if q in table.columns], CLASS]),
                       table.typing.quasi, CLASS, info.sql)
        kfig = ('<p id="lossy-join-k"><strong>Lossy join: two different k.</strong> k-anonymity of the classes '
                f"(records per class id): <strong>k = {_num(ks['class_k'])}</strong>, what the lossy join guarantees "
                "for linking a record to a sensitive value. It is <em>not</em> k-anonymity of the QI values: the QI "
                "table publishes exact QI tuples, and its smallest group of identical QI tuples (class id ignored) "
                f"holds <strong>{_num(ks['qi_table_k'])}</strong> record(s), the QI table's k as an attacker sees it; "
                f"{_num(ks['qi_table_unique_records'])} record(s) have a unique QI tuple.</p>"
                f'<p class="note">{_e(K_MEANING)}.</p>')
    perturbed = perturbations(info.steps, released["step"] if released else None)
    ptext = ""
    if perturbed:
        ptext = ('<p id="perturbations"><strong>Values changed by perturbation.</strong> Each step below changed the '
                 "values of its columns at random or by rule; what it guarantees is its parameters, as declared "
                 "(a perturbation makes no class-based claim of its own):</p><ul>"
                 + "".join(f"<li><code>{_e(p['step'])}</code> ({_e(p['uses'])} {_e(p['plugin_version'])}): "
                           f"{_e(perturbation_text(p['columns']))}</li>" for p in perturbed) + "</ul>")
    parts.append('<section id="privacy"><h2>Privacy guarantees</h2>'
                 + (f"<p>Claimed by the algorithm: {claim_text}.</p>" if claims else
                    "<p>The published step claims no privacy model.</p>") + ptext + kfig + dp_paragraph(info, registry)
                 + (_table(["check", "parameters", "checked by", "result", "holds"], rows) if rows else
                    "<p>No privacy check applies to the published table.</p>")
                 + '<p class="note">A release re-runs these checks on its published files; '
                   "<code>anonflow verify</code> runs them again.</p></section>")

    # disclosure risk (only when the run measured a risk metric)
    if risk:
        parts.append(risk)

    # class sizes
    if table is not None:
        sizes = class_sizes(table, info.sql)
        if len(sizes):
            summary = (f"{len(sizes)} classes over {int(sizes.sum())} records; size min {int(sizes.min())}, "
                       f"median {float(np.median(sizes)):g}, mean {float(sizes.mean()):.4g}, max {int(sizes.max())}.")
            body = f"<p>{_e(summary)}</p>" + class_size_plot(sizes)
        else:
            body = "<p>The published table has no classes.</p>"
        how = "by <code>_class</code>" if CLASS in table.columns else "by published quasi-identifier values"
        parts.append(f'<section id="classes"><h2>Class-size distribution</h2><p class="note">Classes counted {how}.'
                     f"</p>{body}</section>")
    else:
        parts.append('<section id="classes"><h2>Class-size distribution</h2><p>No published table.</p></section>')

    # information loss
    changed = [c for p in perturbed for c in p["columns"]]
    random = {c for p in perturbed for c, d in p["columns"].items() if isinstance(d, dict) and d.get("kind") != "recode"}
    loss_rows = attribute_loss(orig_table, table, info.sql, layout, also=list(dict.fromkeys(changed)), random=random) \
        if table is not None and orig_table is not None else []
    if loss_rows:
        trs = [[f"<code>{_e(r['attribute'])}</code>", _e(r["role"]), _num(r["ambiguity"]),
                _num(r["changed"]), _num(r.get("sse_share")), _num(r["il"])] for r in loss_rows]
        body = (_table(["attribute", "role", "ambiguity loss", "share of records changed", "SSE share",
                        "IL % (100 SSE/SST)"],
                       trs, numeric={2, 3, 4, 5}) + loss_plot(loss_rows))
    elif purged:
        body = (f"<p>The original table (<code>{_e(original['step'])}</code>) was purged from the store "
                "(<code>anonflow purge</code> or the workflow's <code>retain:</code>): the release's own report, "
                "written when it was published, shows this section; re-run the workflow to compute it again.</p>")
    else:
        body = "<p>No original table to compare with (the published step is not an algorithm's output).</p>"
    parts.append('<section id="loss"><h2>Information loss per attribute</h2><p class="note">Computed generically '
                 f"from the original (<code>{_e(original['step']) if original else '-'}</code>) and published values of "
                 "each record, for every quasi-identifier"
                 + (" and every other column a perturbation behind the release changed" if random or changed else "")
                 + ": <em>ambiguity loss</em> = for each record, the number of distinct original values "
                 "published with the same value as its own, minus 1, over the attribute's distinct values minus 1, "
                 "averaged (0: the published value identifies the original value; 1: all merged"
                 + ("; not shown for a column changed at random, PRAM, noise or swapping, where a few records moved "
                    "from each value make every published value stand for many original ones" if random else "")
                 + "); for numeric "
                 "attributes also each attribute's share of the squared error on z-scored values (SSE share) "
                 "and its own IL = 100 SSE/SST; for a lossy-join release the sensitive attribute's ambiguity is the "
                 "mean share of a record's class holding another sensitive value.</p>" + body + "</section>")

    # metrics
    mrows = []
    for key, value in info.metrics.items():
        th = info.thresholds.get(key)
        passed = None
        if th:
            passed = (("min" not in th or value >= th["min"]) and ("max" not in th or value <= th["max"]))
        elif key.endswith(".holds"):
            passed = value == 1.0
        ttext = ", ".join(f"{k} {v:g}" for k, v in sorted(th.items())) if th else ""
        mrows.append([f"<code>{_e(key)}</code>", _num(value), _e(ttext), _verdict(passed)])
    parts.append('<section id="metrics"><h2>Metrics</h2>'
                 + (_table(["value", "result", "threshold", "pass"], mrows, numeric={1}) if mrows else
                    "<p>No metrics were evaluated.</p>") + "</section>")

    # sweep
    body = sweep_section(sweep(info, registry), registry, release_params(info).get("tradeoff"))
    parts.append(f'<section id="sweep"><h2>Utility vs risk across the parameter sweep</h2><p class="note">'
                 f"{_e(SWEEP_RULE)}.</p>{body}</section>")

    # lineage
    g = lineage_graph(info)
    srows = []
    for s in [*info.steps, *([info.current] if info.current else [])]:
        params = shown_params(s)
        if s["kind"] == "source":
            src = next((x for x in info.sources if x["name"] == s["step"]), {})
            ptext = f"sha256 {(src.get('sha256') or '')[:16]}, {len(src.get('columns') or [])} columns"
        else:
            ptext = params_text({k: v for k, v in params.items() if not isinstance(v, (dict, list)) or len(
                canonical_json(v)) <= 80})
        srows.append([_e(s["step"]), _e(s["kind"]), _e(f"{s['uses']} {s.get('plugin_version') or ''}"), _e(ptext),
                      f"<code>{_e(s['output_hash'][:16])}</code>" if s.get("output_hash") else "&ndash;",
                      _num(s.get("rows")) + _suppressed_text(s)])
    parts.append('<section id="lineage"><h2>Lineage</h2>' + lineage_plot(g)
                 + _table(["step", "kind", "uses", "parameters", "output hash", "rows"], srows, numeric={5})
                 + "</section>")

    versions = run.get("versions") or {}
    parts.append(f"<footer><p class=\"note\">anonflow {_e(versions.get('anonflow', ''))}, report by anonflow_std "
                 f"{_e(__version__)}; DuckDB {_e(versions.get('duckdb', ''))}, pyarrow {_e(versions.get('pyarrow', ''))}"
                 f", numpy {_e(versions.get('numpy', ''))}, Python {_e(versions.get('python', ''))}.</p></footer>")
    title = f"anonflow release report: {run['workflow']}"
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_e(title)}</title>\n<style>{CSS.strip()}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")
