"""Claims: what a table says its records satisfy, checked before any table carries it.

An algorithm's output claims the privacy models it declares; a step that leaves records out
(``filter``, ``sample``, ``partition``) of a table that claims something has the claims checked
again on what it keeps (:func:`check_claims`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api import StepContext
from ..errors import InputError, PluginError, RunError
from ..canonjson import canonical_json
from ..params import ParamError, validate_params
from ..table import TypedTable


def check_claims(node: Any, published: TypedTable, ctx: StepContext, where: str, registry: Any,
                 inherited: dict[str, dict[str, Any]] | None = None) -> TypedTable:
    """Check each claimed model with the privacy metric of the same name on the published
    records; a claim that fails stops the run, one no installed metric can judge is dropped
    (with a note): a table never claims what was not checked.

    ``inherited``: the claims of the step's input (an earlier algorithm of a chain) that
    this step does not make itself. Each is checked the same way on this step's output and
    kept when it holds; one that does not hold, or that no metric can judge, is dropped
    with a note, never an error (this step did not claim it). A later step's own claim of
    the same model replaces the input's."""
    inherited = inherited or {}
    own = dict(published.claims)
    kept: dict[str, dict[str, Any]] = {}
    for model, given in [*own.items(), *inherited.items()]:
        carried = model not in own
        source = "of the input (an earlier algorithm) " if carried else ""
        reg = registry.get("metric", model) if registry.has("metric", model) else None
        if reg is None or reg.obj.category != "privacy":
            ctx.note(f"claim {model!r} {source}dropped: no installed privacy metric of that name can check it")
            continue
        checked = published.replace(claims={**own, model: given})
        try:
            mparams = validate_params(reg.obj.params, given)
            result = reg.obj.compute(None, checked, mparams, dataclasses.replace(ctx, notes=[]))
        except (InputError, ParamError) as exc:
            if carried:
                ctx.note(f"claim {model} {canonical_json(given)} {source}dropped: its check cannot take this "
                         f"step's output ({exc})")
                continue
            raise PluginError(f"algorithm {node.uses!r} claims {model} {canonical_json(given)}, which the "
                              f"{model} check cannot take: {exc}", where=where) from None
        holds = result.get(f"{model}.holds")
        if holds is None:
            ctx.note(f"claim {model!r} {source}dropped: its check gives no verdict for {canonical_json(given)}")
            continue
        detail = ", ".join(f"{k} = {float(v):g}" for k, v in result.items() if k != f"{model}.holds")
        if not holds and carried:
            ctx.note(f"claim {model} {canonical_json(given)} of the input (an earlier algorithm) dropped: "
                     f"this step's output does not satisfy it ({detail})")
            continue
        if not holds:
            raise RunError(f"algorithm {node.uses!r} claims {model} {canonical_json(given)} but its output "
                           f"does not satisfy it ({detail})", where=where)
        if carried:
            ctx.note(f"claim {model} {canonical_json(given)} of the input (an earlier algorithm) kept: "
                     "re-checked on this step's output")
        kept[model] = given
    return published.replace(claims=kept)


def recheck_claims(typed: TypedTable, node: Any, ctx: StepContext, where: str, registry: Any) -> TypedTable:
    """``typed`` after a step left records out (``filter``, ``sample``, ``partition``): when
    its input claimed something (an algorithm's output), each claim is kept only where it is
    checked again on the records kept."""
    if typed.claims:
        typed = check_claims(node, typed.replace(claims={}), ctx, where, registry, dict(typed.claims))
    return typed
