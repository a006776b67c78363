"""``anonflow budget``: what the store's privacy ledger says each source has spent of its
differential-privacy budget, and what is left. Parse, ask the session, print."""

from __future__ import annotations

from typing import Any

import click

from ..session import Session
from .shared import DEFAULT_DB, echo_json, guard, printable


def _figures(eps: float | None, delta: float | None) -> str:
    if eps is None:
        return "unknown"
    return f"ε={eps:.6g}, δ={delta:.6g}"


def _lines(acc: dict[str, Any]) -> list[str]:
    budget, spent, left = acc["budget"], acc["spent"], acc["left"]
    out = [f"source {printable(acc['source'])}  sha256 {acc['source_hash'][:16]}..."]
    if budget is not None:
        out.append(f"  budget  {_figures(budget['epsilon'], budget['delta'])} (declared by run {budget['run_id']}, "
                   "the latest that declared one)")
    else:
        out.append("  budget  none declared (a source's budget: in the workflow file)")
    if not acc["charges"]:
        out.append("  spent   nothing")
    elif spent["epsilon"] is None:
        out.append(f"  spent   zCDP ρ={spent['rho']:.6g} and ε={spent['pure'] + spent['approximate'][0]:.6g}, "
                   f"δ={spent['approximate'][1]:.6g} in {acc['charges']} charge(s); no budget declares the δ to "
                   "state ρ as (ε, δ) at")
    else:
        out.append(f"  spent   {_figures(spent['epsilon'], spent['delta'])} ({spent['composition']} composition of "
                   f"{acc['charges']} charge(s))")
        out.append(f"          as charged: pure ε={spent['pure']:.6g}; approximate ε={spent['approximate'][0]:.6g}, "
                   f"δ={spent['approximate'][1]:.6g}; zCDP ρ={spent['rho']:.6g}")
    if left is not None:
        out.append(f"  left    {_figures(left['epsilon'], left['delta'])}")
    return out


@click.command()
@click.argument("source", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True, help="DuckDB store file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guard
def budget(source: str | None, db: str, as_json: bool) -> None:
    """Show the differential privacy each source has spent, from the store's privacy ledger:
    its budget (as the latest workflow that declared one states it), what all runs spent on
    its content (composed by OpenDP: basic composition of (ε, δ), or zCDP, whichever is
    tighter, named), and what is left. SOURCE: a source's name or a prefix of its content hash
    (default: every source the ledger knows). docs/differential-privacy.md."""
    rows = Session(db).budgets(source)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"the privacy ledger of {db} is empty: no run has spent differential privacy")
    for acc in rows:
        for line in _lines(acc):
            click.echo(line)
