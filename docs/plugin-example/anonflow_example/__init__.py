"""An example anonflow plugin: the discernibility metric (Bayardo & Agrawal, 2005).

Discernibility charges every record the size of the equivalence class it falls into:
DM = sum over classes E of |E|^2. Lower is better; DM / n is the mean class size a record
sees. Classes are formed by grouping on the published quasi-identifier values, in DuckDB.
"""

from __future__ import annotations

from anonflow.api import CLASS, ROW, InputError, Metric, Param, hookimpl


class Discernibility(Metric):
    name = "example.discernibility"      # third parties prefix their names
    version = "1.0.0"
    description = "Discernibility DM = sum of squared class sizes (lower is better)."
    category = "utility"
    requires_original = False            # needs only the anonymized table
    params = (
        Param("normalize", "bool", default=False, help="divide by n^2 (0 < DM/n^2 <= 1)"),
    )

    def compute(self, original, anonymized, params, ctx):
        quasi = anonymized.typing.quasi
        if not quasi:
            raise InputError("example.discernibility needs quasi-identifiers")
        published = anonymized.data.drop_columns([c for c in (ROW, CLASS) if c in anonymized.columns])
        group = ", ".join('"' + c.replace('"', '""') + '"' for c in quasi)
        dm, n = ctx.sql(
            f"SELECT sum(c * c), sum(c) FROM (SELECT count(*) AS c FROM published GROUP BY {group})",
            published=published,
        ).to_pylist()[0].values()
        value = dm / (n * n) if params["normalize"] else dm
        return {self.name: float(value), f"{self.name}.mean_class_size": dm / n}


@hookimpl
def anonflow_register_metrics(register):
    register(Discernibility())
