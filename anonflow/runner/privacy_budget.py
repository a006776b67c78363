"""The privacy budget of a run: which steps spend differential privacy, on which sources, and
whether the store's privacy ledger has room for it.

Before a run begins (and before any source is read into the store), :func:`dp_steps` asks each
step's plugin for the loss it spends (:meth:`anonflow.api.Plugin.privacy_loss`, checked by
:func:`anonflow.privacyloss.check_loss`) and finds, in the plan's graph, the sources its
input descends from (inputs and tables its parameters name alike). :func:`check_budgets`
composes, per source that declares a ``budget:``, what earlier runs charged to the source's
content hash with what this run would spend (:func:`anonflow.dpcompose.compose`, through
OpenDP), and refuses the run in one line when it would go over: first when the session plans
the run (:func:`check_before_reading`, before any source is opened for its records), again
as the run begins, under the store's lock. The run loop charges each
step's loss when the step starts (:func:`charges_of`), never taking it back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import networkx as nx

from ..errors import AnonflowError, BudgetError, InputError, PluginError, WorkflowError
from ..params import ParamError, metric_entries, suggest, validate_params
from ..privacyloss import Charge, check_budget, check_loss, shown_loss
from ..steps import step_of
from .plan import Plan, build_plan


@dataclass(frozen=True)
class DPStep:
    """A step that spends differential privacy: its checked loss and the sources it spends on."""

    step: str
    loss: dict[str, Any]
    #: the source names its input (and the tables its parameters name) descend from
    sources: tuple[str, ...]


def _plugin_and_params(plan: Plan, name: str, registry: Any) -> list[tuple[Any, str, dict[str, Any]]]:
    """The plugins the step runs with their parameters: (registered, how a message names it, params)."""
    node = plan.nodes[name]
    where = plan.spec.where(f"step {name!r}")
    if node.kind == "algorithm" and node.plugin is not None:
        return [(node.plugin, f"algorithm {node.uses!r}", node.params)]
    if node.kind == "publish":
        _own, reg, rest = step_of(node).validate_all(node.params, registry, where)
        return [(reg, f"publisher {reg.name!r}", rest)]
    if node.kind == "evaluate":
        found = []
        for metric, given in metric_entries(node.params.get("metrics"), where):
            reg = registry.get("metric", metric, where=where)
            try:
                found.append((reg, f"metric {metric!r}", validate_params(reg.obj.params, given)))
            except ParamError:  # the plan has said so already
                continue
        return found
    return []


def _declared(reg: Any, who: str, params: dict[str, Any], where: str) -> dict[str, Any] | None:
    named = f"{who} ({reg.distribution} {reg.version})"
    try:
        declared = reg.obj.privacy_loss(params)
    except AnonflowError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as the plugin's, in one line
        raise PluginError(f"{named}: privacy_loss() failed: {type(exc).__name__}: {exc}", where=where) from None
    if declared is None:
        return None
    try:
        return check_loss(declared)
    except ValueError as exc:
        raise PluginError(f"{named}: privacy_loss() is not a valid differential-privacy loss: {exc}",
                          where=where) from None


def dp_steps(plan: Plan, registry: Any) -> dict[str, DPStep]:
    """The plan's steps whose plugin declares a privacy loss, by name, in the plan's order.
    A malformed declaration is one line naming the step and the plugin; an evaluate step's
    metric may not declare one (only algorithm and publish steps are charged)."""
    sources = set(plan.spec.sources)
    out: dict[str, DPStep] = {}
    for name in plan.order:
        where = plan.spec.where(f"step {name!r}")
        node = plan.nodes[name]
        losses = [(who, loss) for reg, who, params in _plugin_and_params(plan, name, registry)
                  if (loss := _declared(reg, who, params, where)) is not None]
        if not losses:
            continue
        if node.kind == "evaluate":
            raise WorkflowError(f"{losses[0][0]} declares a differential-privacy loss; an evaluate step is not charged "
                                "to the privacy budget: compute it in an algorithm or publish step", where=where)
        ancestors = nx.ancestors(plan.graph, name)
        out[name] = DPStep(name, losses[0][1], tuple(s for s in plan.spec.sources if s in ancestors and s in sources))
    return out


def source_identity(src: Any) -> str:
    """The account a source's spends are charged to: its content hash before it is read (a
    file's sha256), or, for a source known only once read (a database server's table), the
    sha256 of where it comes from, prefixed ``origin:``."""
    digest = src.kind.content_hash(src) if src.kind is not None else ""
    if digest:
        return str(digest)
    return "origin:" + hashlib.sha256(str(src.kind.origin(src)).encode()).hexdigest()


@dataclass
class Account:
    """One source's account for a run: its budget, what earlier runs charged, what this run asks."""

    name: str
    identity: str
    budget: tuple[float, float] | None
    earlier: list[Charge]
    requested: list[tuple[str, Charge]]


def accounts(plan: Plan, steps: dict[str, DPStep], store: Any) -> dict[str, Account]:
    """Per source that a DP step spends on or that declares a budget (only when the plan has a
    DP step): its account. Reads each source's content hash (a file's bytes), never its records
    into the store."""
    if not steps:
        return {}
    spec = plan.spec
    names = [s for s in spec.sources if s in plan.nodes and s in plan.order
             and (s in spec.budgets or any(s in d.sources for d in steps.values()))]
    out: dict[str, Account] = {}
    for name in names:
        try:
            identity = source_identity(spec.sources[name])
        except AnonflowError as exc:
            raise type(exc)(exc.message, where=spec.where(exc.where or f"source {name!r}")) from None
        budget = check_budget(spec.budgets[name]) if name in spec.budgets else None
        earlier = [Charge(r["measure"], r["epsilon"], r["delta"], r["rho"]) for r in store.charges(identity)]
        requested = [(d.step, Charge.of(d.loss)) for d in steps.values() if name in d.sources]
        out[name] = Account(name, identity, budget, earlier, requested)
    return out


def check_budgets(plan: Plan, steps: dict[str, DPStep], store: Any) -> dict[str, Account]:
    """The run's accounts (:func:`accounts`); raise :class:`BudgetError` (one line, naming the
    source, its budget, what was spent and what this run asks) when a source's budget has no
    room for this run's spends. Composition through OpenDP (:func:`anonflow.dpcompose.compose`)."""
    found = accounts(plan, steps, store)
    if not any(a.budget is not None and a.requested for a in found.values()):
        return found
    compose = _compose()
    for acc in found.values():
        if acc.budget is None or not acc.requested:
            continue
        eps, delta = acc.budget
        spent = compose(acc.earlier, delta)
        total = compose([*acc.earlier, *(c for _, c in acc.requested)], delta)
        # OpenDP rounds its sums up: a budget met exactly (0.1 spent ten times on 1.0) is not refused
        # for the last bit of a float
        if total["epsilon"] <= eps * (1 + 1e-9) and total["delta"] <= delta * (1 + 1e-9):
            continue
        asked = "; ".join(f"{step}: {shown_loss(c.__dict__)}" for step, c in acc.requested)
        was = (f"earlier runs spent {_pair(spent)} ({spent['composition']} composition)" if acc.earlier
               else "earlier runs spent nothing")
        raise BudgetError(
            f"the run would spend {_pair(total)} in all ({total['composition']} composition), over the "
            f"budget ε={eps:.6g}, δ={delta:.6g} of source {acc.name!r} (sha256 {acc.identity[:16]}...): {was}, "
            f"this run asks {asked}; refused before any record is read",
            where=plan.spec.where(f"source {acc.name!r}"))
    return found


def _compose() -> Any:
    """:func:`anonflow.dpcompose.compose`, whose module loads OpenDP (a second): imported only
    where a spend is composed."""
    try:
        from ..dpcompose import compose  # deferred: OpenDP takes a second to load; only DP accounting needs it
    except ImportError as exc:
        raise InputError(f"composing differential-privacy spends needs OpenDP ({exc}): pip install "
                         "'anonflow[dp]'") from None
    return compose


def ledger_report(store: Any, source: str | None = None) -> list[dict[str, Any]]:
    """What ``anonflow budget`` shows, per source the store's privacy ledger knows (or the one
    ``source`` names: its name or a prefix of its content hash): ``{"source", "source_hash",
    "budget" (the latest a workflow declared, or None), "charges" (how many), "spent" (the
    composition of every charge: :func:`anonflow.dpcompose.compose`), "left"}``."""
    accounts_ = store.privacy_accounts()
    if source is not None:
        chosen = [a for a in accounts_ if a["source_name"] == source] or \
                 [a for a in accounts_ if a["source_hash"].startswith(source)]
        if not chosen:
            names = sorted({a["source_name"] for a in accounts_})
            raise InputError(f"no source {source!r} in the privacy ledger{suggest(source, names)}; it knows "
                             + (", ".join(names) or "none"))
        accounts_ = chosen
    out = []
    for acc in accounts_:
        budget = acc["budget"]
        charges = [Charge(r["measure"], r["epsilon"], r["delta"], r["rho"]) for r in acc["charges"]]
        if charges:
            spent = _compose()(charges, budget["delta"] if budget else None)
        else:
            spent = {"epsilon": 0.0, "delta": 0.0, "composition": None, "pure": 0.0, "approximate": [0.0, 0.0],
                     "rho": 0.0}
        left = None
        if budget is not None and spent["epsilon"] is not None:
            left = {"epsilon": max(budget["epsilon"] - spent["epsilon"], 0.0),
                    "delta": max(budget["delta"] - spent["delta"], 0.0)}
        out.append({"source": acc["source_name"], "source_hash": acc["source_hash"], "budget": budget,
                    "charges": len(charges), "spent": spent, "left": left})
    return out


def _pair(composed: dict[str, Any]) -> str:
    return shown_loss({"epsilon": composed["epsilon"], "delta": composed["delta"]})


class _NoLedger:
    """The ledger of a store that does not exist yet: nothing charged."""

    @staticmethod
    def charges(source_hash: str | None = None) -> list[dict[str, Any]]:
        return []


def check_before_reading(spec: Any, registry: Any, store: Any | None) -> None:
    """:func:`check_budgets` of ``spec`` against ``store``'s ledger (None: an empty one) on a
    plan built without describing the sources, so that a run over its budget is refused before
    any source is opened for its records (planning reads a CSV whole to sniff its types). Any
    other error is left for the full plan, which reports it as it always does."""
    try:
        plan = build_plan(spec, registry, check_columns=False)
        steps = dp_steps(plan, registry)
    except Exception:  # noqa: BLE001 - the full plan reports it
        return
    if steps:
        check_budgets(plan, steps, store if store is not None else _NoLedger())


def charges_of(step: DPStep, found: dict[str, Account]) -> list[tuple[str, str, Charge]]:
    """What the ledger charges for ``step``: its loss on each source it spends on."""
    return [(found[s].identity, s, Charge.of(step.loss)) for s in step.sources if s in found]
