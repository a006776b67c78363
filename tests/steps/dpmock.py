"""A mock differentially private algorithm for the privacy-budget tests: it declares the loss
its parameters name (``Plugin.privacy_loss``) and passes its input through, each record its own
class. The real DP plugins (SafePub, OpenDP's aggregates) live in plugins/ and are tested there."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa

from anonflow.api import CLASS, Algorithm, Param

from tests.support.mockplugins import Provider, use


class Spend(Algorithm):
    """Declares ``{"measure": measure, ...}`` from its parameters; changes no value."""

    name = "test.dp-spend"
    version = "1"
    per_fragment = False
    params = (Param("measure", "str", default="pure"), Param("epsilon", "float", default=None),
              Param("delta", "float", default=None), Param("rho", "float", default=None))

    def __init__(self, declared=None):
        self.declared = declared  # a declaration given as is (a malformed one, say)

    def privacy_loss(self, params):
        if self.declared is not None:
            return self.declared
        loss = {"measure": params["measure"], "mechanism": "test"}
        for key in ("epsilon", "delta", "rho"):
            if params[key] is not None:
                loss[key] = params[key]
        return loss

    def run(self, table, params, ctx):
        return table.replace(data=table.data.append_column(CLASS, pa.array(np.arange(table.num_rows), pa.int64())))


DATA = "age,zip,income\n" + "".join(f"{20 + i % 40},{1000 + i % 7},{1000 * (i % 13)}\n" for i in range(60))


def project(folder: Path, steps: str, budget: str | None = None, name: str = "wf.yaml",
            data: str = "people.csv", retain: str = "all") -> Path:
    """A workflow in ``folder`` reading ``data`` (a small CSV, written if missing), typed as
    ``typed``, with ``steps`` (YAML, indented as steps), the source's ``budget`` (YAML flow) and
    ``retain``."""
    if not (folder / data).exists():
        (folder / data).write_text(DATA)
    budget_line = f"\n    budget: {budget}" if budget else ""
    text = textwrap.dedent("""\
        name: dp-test
        seed: 3
        retain: {retain}
        sources:
          people:
            path: {data}{budget}
        steps:
          typed:
            uses: typing
            input: people
            with: {{quasi: [age, zip], insensitive: [income]}}
        """).format(data=data, budget=budget_line, retain=retain)
    text += textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    path = folder / name
    path.write_text(text)
    return path


def spend_step(name: str, loss: str, publish: bool = True) -> str:
    """A DP step ``name`` spending ``loss`` (YAML flow of Spend's parameters), published as CSV."""
    out = f"{name}:\n  uses: test.dp-spend\n  input: typed\n  with: {loss}\n"
    if publish:
        out += f"{name}-csv:\n  uses: publish\n  input: {name}\n  with: {{publisher: csv, path: {name}.csv}}\n"
    return out


def register(*algorithms):
    """The installed plugins plus ``algorithms`` (default: one :class:`Spend`)."""
    return use(Provider(algorithms=list(algorithms) or [Spend()]))
