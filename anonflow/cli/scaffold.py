"""``anonflow new-plugin NAME``: a complete, installable plugin package to start from.

``generate("acme", folder)`` writes ``folder/anonflow-acme/``: the distribution
``anonflow-acme`` with the import package ``anonflow_acme``, registered under the entry
point ``acme``, holding one working plugin of each kind (names prefixed ``acme.``):

- ``acme.sorted-groups`` (algorithm): sort by the quasi-identifiers, cut into groups of k
  consecutive records, publish group means (continuous QIs) and the lowest hierarchy level a
  group agrees on (others); claims k-anonymity, which the engine checks on every output;
- ``acme.class-size`` (metric): the average equivalence class size, and C_avg = that / k;
- ``acme.jsonl`` (publisher): JSON Lines through ``ctx.resolve_output`` and ``atomic_write``;
- ``acme.prefix`` (hierarchy builder): codes generalized to shorter prefixes per level;

with tests written against :mod:`anonflow.testing`, a workflow using all four on a small
synthetic CSV it ships (``data/people.csv``), a README and a ``.gitignore``. The templates
are the string constants below (so a plain ``pip install`` ships them with this module).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import click

#: a plugin package name: lower-case letters and digits, words joined by '_' or '-'
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")
MAX_NAME = 40
#: entry-point names anonflow itself uses (a second 'std' would never be loaded)
RESERVED = ("std", "anonflow")


class ScaffoldError(click.ClickException):
    """A bad NAME or target folder: one line on stderr, exit code 2."""

    exit_code = 2


def check_name(name: str) -> None:
    if not NAME_RE.match(name) or len(name) > MAX_NAME:
        raise ScaffoldError(f"new-plugin: invalid NAME {name!r}: use lower-case letters and digits, starting with a "
                            f"letter, words joined by '_' or '-' (at most {MAX_NAME} characters), e.g. acme")
    if name in RESERVED:
        raise ScaffoldError(f"new-plugin: NAME {name!r} is reserved by anonflow; choose another, e.g. acme")


def names(name: str) -> dict[str, str]:
    """The placeholders of the templates for plugin package ``name``."""
    return {"__NAME__": name, "__PKG__": "anonflow_" + name.replace("-", "_"), "__DIST__": "anonflow-" + name}


def render(template: str, name: str) -> str:
    for key, value in names(name).items():
        template = template.replace(key, value)
    return template


def files(name: str) -> dict[str, str]:
    """Relative path -> content of every file of the generated package."""
    pkg = names(name)["__PKG__"]
    out = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        ".gitignore": GITIGNORE,
        f"{pkg}/__init__.py": INIT,
        f"{pkg}/algorithm.py": ALGORITHM,
        f"{pkg}/metric.py": METRIC,
        f"{pkg}/publisher.py": PUBLISHER,
        f"{pkg}/hierarchy.py": HIERARCHY,
        f"tests/test_{pkg.removeprefix('anonflow_')}.py": TESTS,
        "workflow.yaml": WORKFLOW,
    }
    out = {path: render(text, name) for path, text in out.items()}
    out["data/people.csv"] = people_csv()
    return out


def people_csv(n: int = 200, seed: int = 20260101) -> str:
    """A small synthetic table (age, zip, sex, disease), the same bytes on every machine: a
    linear congruential generator, not Python's or numpy's random streams."""
    state = seed

    def draw(m: int) -> int:
        nonlocal state
        state = (6364136223846793005 * state + 1442695040888963407) % 2**64
        return (state >> 33) % m

    zips = ["13053", "13068", "13201", "13205", "14850", "14853", "14882", "14886"]
    diseases = ["asthma", "bronchitis", "diabetes", "flu", "hypertension", "migraine"]
    lines = ["age,zip,sex,disease"]
    for _ in range(n):
        lines.append(f"{18 + draw(72)},{zips[draw(len(zips))]},{'FM'[draw(2)]},{diseases[draw(len(diseases))]}")
    return "\n".join(lines) + "\n"


def generate(name: str, directory: str | os.PathLike[str] = ".") -> Path:
    """Write the package ``anonflow-NAME/`` inside ``directory`` and return its folder.

    Refuses (:class:`ScaffoldError`) a bad name and a target that exists and is not an empty
    folder: nothing a user wrote is ever overwritten. The files are written to a temporary
    folder beside the target and renamed into place, so a failure leaves nothing behind."""
    check_name(name)
    base = Path(directory)
    target = base / names(name)["__DIST__"]
    if base.is_symlink() and not base.is_dir():
        raise ScaffoldError(f"new-plugin: --dir {base} is a symbolic link to {os.readlink(base)}, which is not a "
                            "folder; nothing was written")
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink() or any(target.iterdir()):
            raise ScaffoldError(f"new-plugin: {target} already exists and is not an empty folder; nothing was "
                                "written (choose another --dir, or move it away)")
    tmp: Path | None = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        # a fresh folder of an unpredictable name, made by mkdir (never through a link someone planted)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=base))
        for rel, text in files(name).items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's folder is the owner's only; the package is as any folder
        if target.is_dir() and not target.is_symlink():
            target.rmdir()  # empty (checked above)
        os.rename(tmp, target)
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ScaffoldError(f"new-plugin: cannot write {target}: {exc.strerror or exc}; no package was written") from None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


@click.command("new-plugin")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              help="Folder to create anonflow-NAME/ in (default: the current folder).")
def new_plugin(name: str, directory: Path) -> None:
    """Create a plugin package to start from: anonflow-NAME/ with one algorithm, metric,
    publisher and hierarchy builder (named NAME.*), their tests, and a workflow with data."""
    target = generate(name, directory)
    n = names(name)
    click.echo(f"created {target}{os.sep}: {n['__DIST__']} (import package {n['__PKG__']}, entry point {name})")
    click.echo(f"  plugins: {name}.sorted-groups (algorithm), {name}.class-size (metric), "
               f"{name}.jsonl (publisher), {name}.prefix (hierarchy builder)")
    click.echo("next:")
    click.echo(f"  cd {target}")
    click.echo("  pip install -e '.[test]'        # registers the entry point")
    click.echo("  python -m pytest -q")
    click.echo("  anonflow run workflow.yaml")


# -- templates ---------------------------------------------------------------------------------
# __NAME__: the plugin package name (acme); __PKG__: the import package (anonflow_acme);
# __DIST__: the distribution (anonflow-acme).

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "__DIST__"
version = "0.1.0"
description = "anonflow plugins: __NAME__.sorted-groups, __NAME__.class-size, __NAME__.jsonl, __NAME__.prefix."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["anonflow"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The whole registration: anonflow imports every module named in the "anonflow"
# entry-point group and calls the hooks it implements.
[project.entry-points.anonflow]
__NAME__ = "__PKG__"

[tool.setuptools]
packages = ["__PKG__"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]       # the tests import __PKG__ from this folder, installed or not
'''

GITIGNORE = '''\
out/
*.duckdb
*.duckdb.wal
build/
*.egg-info/
__pycache__/
.pytest_cache/
'''

README = '''\
# __DIST__

anonflow plugins, one of each kind (generated by `anonflow new-plugin __NAME__`):

| plugin | kind | what it does |
| --- | --- | --- |
| `__NAME__.sorted-groups` | algorithm | sorts the records by their quasi-identifiers and cuts them into groups of `k` consecutive records (the last has k..2k-1); publishes each group's mean for continuous QIs and, for the others, the lowest level of the column's hierarchy the group agrees on (`*` if none). Claims k-anonymity; the engine checks the claim on every output. |
| `__NAME__.class-size` | metric (utility) | average equivalence class size n / classes over the published QI values, and C_avg = that / k (`k`: a parameter, or the k the table claims) |
| `__NAME__.jsonl` | publisher | one JSON object per record (JSON Lines), written atomically inside the output folder |
| `__NAME__.prefix` | hierarchy builder | codes generalized to shorter prefixes: `13053` -> `1305*` -> `130*` -> `*` (`keep: [4, 3]`) |

## Use it

```bash
pip install -e '.[test]'        # installs the package and its entry point "__NAME__"
anonflow plugins | grep __NAME__
python -m pytest -q             # the tests in tests/
anonflow run workflow.yaml      # data/people.csv -> out/__NAME__-demo.jsonl; store ./anonflow.duckdb
```

`workflow.yaml` types `data/people.csv` (200 synthetic records: age, zip, sex, disease),
builds a `__NAME__.prefix` hierarchy for `zip`, anonymizes with `__NAME__.sorted-groups`
(k = 5), evaluates `__NAME__.class-size` and anonflow's `k-anonymity`, and publishes with
`__NAME__.jsonl`.

## Layout

```
pyproject.toml             the entry point: [project.entry-points.anonflow] __NAME__ = "__PKG__"
__PKG__/__init__.py   the hooks: hand each plugin object to anonflow
__PKG__/algorithm.py  __NAME__.sorted-groups
__PKG__/metric.py     __NAME__.class-size
__PKG__/publisher.py  __NAME__.jsonl
__PKG__/hierarchy.py  __NAME__.prefix
tests/                     pytest, with anonflow.testing
workflow.yaml, data/       a workflow using all four plugins
```

Bump a plugin's `version` when you change what it computes: it is recorded with every step
(anonflow also keys its cache on a digest of this package's code, so an edited plugin is
never served a stored result). The plugin contract is anonflow's `docs/plugins.md`.
'''

INIT = '''\
"""__DIST__: anonflow plugins, one of each kind.

anonflow finds this module through the entry point in pyproject.toml and calls the hooks
below; each hands its plugin objects to anonflow's registry.
"""

from __future__ import annotations

from anonflow.api import hookimpl

from .algorithm import SortedGroups
from .hierarchy import Prefix
from .metric import AverageClassSize
from .publisher import JsonLines

__version__ = "0.1.0"
__all__ = ["SortedGroups", "AverageClassSize", "JsonLines", "Prefix"]


@hookimpl
def anonflow_register_algorithms(register):
    register(SortedGroups())


@hookimpl
def anonflow_register_metrics(register):
    register(AverageClassSize())


@hookimpl
def anonflow_register_publishers(register):
    register(JsonLines())


@hookimpl
def anonflow_register_hierarchy_builders(register):
    register(Prefix())
'''

ALGORITHM = '''\
"""__NAME__.sorted-groups: k-anonymity by sorting and cutting into groups.

The records are sorted by their quasi-identifiers (the non-continuous ones first, then the
continuous ones, ties broken by ``_row``) and cut into groups of ``k`` consecutive records;
the last group takes the remainder, so it has k..2k-1 records. Each group publishes one value
per quasi-identifier:

- continuous: the group's mean (microaggregation);
- any other: the lowest level of the column's hierarchy (from a ``hierarchy`` step) at which
  the group's values agree -- without a hierarchy, the value when all are equal -- else ``*``.

All records of a group then share their published quasi-identifiers, so every class of
records with equal published values holds at least k records: the algorithm claims
k-anonymity, and the engine checks the claim on each output with the ``k-anonymity`` metric.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import CLASS, ROW, Algorithm, Hierarchy, InputError, Param, StepContext, TypedTable, sql_ident


class SortedGroups(Algorithm):
    name = "__NAME__.sorted-groups"
    version = "0.1.0"
    description = ("Sort by the quasi-identifiers and cut into groups of k consecutive records; publish group "
                   "means (continuous QIs) and the lowest common hierarchy level (others). k-anonymous.")
    params = (
        Param("k", "int", min=2, help="records per group (the last group has k..2k-1)"),
    )

    def claims(self, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return {"k-anonymity": {"k": params["k"]}}

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        # called before run, and by `anonflow plan` on the previewed input
        if table is None:
            return
        quasi = table.typing.quasi
        if not quasi:
            raise InputError(f"{self.name} needs quasi-identifiers: name them under 'quasi' in the typing step")
        if params["k"] > table.num_rows:
            raise InputError(f"parameter 'k' = {params['k']} is larger than the table ({table.num_rows} records)")
        for column in quasi:
            if table.column(column).null_count:
                raise InputError(f"{self.name}: quasi-identifier {column!r} has missing values; drop or impute "
                                 "them in the typing step (missing: ...)")

    def run(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> TypedTable:
        k = params["k"]
        types = {a.name: a.type for a in table.typing.attributes if a.role == "quasi"}
        continuous = [c for c in table.typing.quasi if types[c] == "continuous"]
        others = [c for c in table.typing.quasi if types[c] != "continuous"]
        cols = table.select([ROW, *others, *continuous])   # only the columns needed are read
        n = cols.num_rows
        order = pc.sort_indices(cols, sort_keys=[(c, "ascending") for c in [*others, *continuous, ROW]])
        labels = np.empty(n, dtype=np.int64)
        labels[order.to_numpy()] = np.minimum(np.arange(n) // k, n // k - 1)
        sizes = np.bincount(labels)
        new: dict[str, pa.Array] = {}
        for c in continuous:
            x = cols.column(c).to_numpy().astype(np.float64)
            new[c] = pa.array((np.bincount(labels, weights=x) / sizes)[labels], type=pa.float64())
        for c in others:
            new[c] = common_level(cols.column(c).combine_chunks(), labels, table.hierarchies.get(c))
        new[CLASS] = pa.array(labels, type=pa.int64())
        ctx.note(f"{sizes.size} groups of {int(sizes.min())}..{int(sizes.max())} records")
        return replace_columns(table, new, ctx)


def common_level(values: pa.Array, labels: np.ndarray, hierarchy: Hierarchy | None) -> pa.Array:
    """Each record's published text: the lowest level at which its group's values agree
    (levels of ``hierarchy``, or just the value itself), else ``*``."""
    if hierarchy is not None:
        levels = [hierarchy.generalize(values, i) for i in range(hierarchy.height + 1)]
    else:
        levels = [pc.cast(values, pa.string())]
    groups = int(labels.max()) + 1
    chosen = np.full(groups, -1)
    for i, level in enumerate(levels):
        codes = pc.dictionary_encode(level).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        m = int(codes.max()) + 1
        distinct = np.bincount(np.unique(labels * m + codes) // m, minlength=groups)
        chosen[(distinct == 1) & (chosen < 0)] = i
    out = np.full(labels.size, "*", dtype=object)
    for i, level in enumerate(levels):
        take = chosen[labels] == i
        out[take] = level.to_numpy(zero_copy_only=False)[take]
    return pa.array(out, type=pa.string())


def replace_columns(table: TypedTable, new: Mapping[str, pa.Array], ctx: StepContext) -> TypedTable:
    """``table`` with the columns of ``new`` replaced or added (arrays in the table's order).
    A table in the store stays there: the new columns are joined to it by position."""
    if table.loaded or ctx.derive is None:
        data = table.data
        columns = {c: new.get(c, data.column(c)) for c in data.column_names}
        columns.update({c: a for c, a in new.items() if c not in columns})
        return table.replace(data=pa.table(columns))
    select = ", ".join(f"g.{sql_ident(c)}" if c in new else f"t.{sql_ident(c)}" for c in table.columns)
    added = "".join(f", g.{sql_ident(c)}" for c in new if c not in table.columns)
    out = ctx.derive(f"SELECT {select}{added} FROM base t POSITIONAL JOIN gen g", base=table, gen=pa.table(dict(new)))
    return out.replace(typing=table.typing, hierarchies=table.hierarchies)
'''

METRIC = '''\
"""__NAME__.class-size: the average equivalence class size.

Records with equal published quasi-identifier values form a class; the metric is
n / classes, the number of records a record is confused with on average (lower is better,
at least k on a k-anonymous table). ``.normalized`` is C_avg = (n / classes) / k (LeFevre
et al., 2006), 1 at best, when k is known: the parameter ``k``, or the k-anonymity the
table claims (an algorithm's claims reach a metric as ``anonymized.claims``).
"""

from __future__ import annotations

from typing import Any, Mapping

from anonflow.api import InputError, Metric, Param, StepContext, TypedTable, sql_ident


class AverageClassSize(Metric):
    name = "__NAME__.class-size"
    version = "0.1.0"
    description = "Average equivalence class size n / classes over the published QI values; .normalized = that / k."
    category = "utility"
    requires_original = False            # needs only the anonymized table
    params = (
        Param("k", "int", default=None, nullable=True, min=1,
              help="the k to normalize by (default: the k of the table's k-anonymity claim)"),
    )

    def check(self, params: Mapping[str, Any], **tables: TypedTable) -> None:
        # evaluate steps pass anonymized= (and original=); `anonflow plan` may pass only typed=
        table = tables.get("anonymized") or tables.get("typed")
        if table is not None and not table.typing.quasi:
            raise InputError(f"{self.name} needs quasi-identifiers in the typing of its input")

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        group = ", ".join(sql_ident(c) for c in anonymized.typing.quasi)
        row = ctx.sql(f"SELECT sum(c) AS n, count(*) AS classes FROM "
                      f"(SELECT count(*) AS c FROM published GROUP BY {group})", published=anonymized).to_pylist()[0]
        if not row["classes"]:
            raise InputError(f"{self.name}: the table has no records")
        average = row["n"] / row["classes"]
        out = {self.name: float(average), f"{self.name}.classes": float(row["classes"])}
        k = params["k"] if params["k"] is not None else anonymized.claims.get("k-anonymity", {}).get("k")
        if k is not None:
            out[f"{self.name}.normalized"] = average / k
        return out
'''

PUBLISHER = '''\
"""__NAME__.jsonl: the table as JSON Lines, one JSON object per record."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from anonflow.api import InputError, Output, Param, Publisher, StepContext, TypedTable, atomic_write


class JsonLines(Publisher):
    name = "__NAME__.jsonl"
    version = "0.1.0"
    description = "Write the table as JSON Lines: one JSON object per record, keys in column order."
    params = (
        Param("path", "str", help="output file (.jsonl), relative to the output folder"),
    )
    # outputs = ("path",) (the default): the engine checks that path before the run starts

    def check(self, params: Mapping[str, Any], table: TypedTable | None = None, **_: Any) -> None:
        # called when the workflow is validated (workflow_dir=, no table), by `anonflow plan`
        # (table= or typed=, the previewed input) and right before publish (table=)
        path = params.get("path")
        if isinstance(path, str) and not path.endswith((".jsonl", ".ndjson")):
            raise InputError(f"{self.name}: path {path!r} should end in .jsonl (or .ndjson)")

    def publish(self, table: TypedTable, params: Mapping[str, Any], ctx: StepContext) -> list[Output]:
        path = ctx.resolve_output(params["path"])   # absolute, inside the output folder, checked
        data = table.data                           # ordered by class, without _row

        def write(tmp: Path) -> None:
            with open(tmp, "w", encoding="utf-8", newline="\\n") as fh:
                for batch in data.to_batches(max_chunksize=10_000):
                    for record in batch.to_pylist():
                        fh.write(json.dumps({k: _plain(v) for k, v in record.items()}, ensure_ascii=False,
                                            allow_nan=False, default=str) + "\\n")

        digest = atomic_write(path, write)          # a temporary file renamed into place; its sha256
        return [Output(str(path), digest, data.num_rows)]


def _plain(value: Any) -> Any:
    """NaN and infinities as null (JSON has no such numbers)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value
'''

HIERARCHY = '''\
"""__NAME__.prefix: codes generalized to shorter prefixes, one prefix length per level.

``keep: [4, 3]`` gives ``13053`` -> ``1305*`` -> ``130*`` -> ``*``. A value no longer than
a level's length stays as it is at that level.
"""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import Hierarchy, HierarchyBuilder, InputError, Param, StepContext


class Prefix(HierarchyBuilder):
    name = "__NAME__.prefix"
    version = "0.1.0"
    description = "Codes generalized to shorter prefixes (13053 -> 1305* -> 130* -> *), one length per level."
    primary = "keep"                 # zip: {__NAME__.prefix: [4, 3]} means keep: [4, 3]
    params = (
        Param("keep", "list", items="int", help="characters kept at levels 1, 2, ... (decreasing, e.g. [4, 3])"),
    )

    def build(self, column: str, values: pa.Array, params: Mapping[str, Any], ctx: StepContext) -> Hierarchy:
        keep = params["keep"]
        if not keep or min(keep) < 1 or any(a <= b for a, b in zip(keep, keep[1:])):
            raise InputError(f"{self.name}: keep must list decreasing positive lengths, e.g. [4, 3]; got {keep}")
        if pa.types.is_floating(values.type):
            raise InputError(f"{self.name}: column {column!r} must hold codes (text or integers), not {values.type}")
        codes = pc.cast(values, pa.string()).to_pylist()
        levels = [codes]
        for n in keep:
            levels.append([c[:n] + "*" if len(c) > n else c for c in codes])
        levels.append(["*"] * len(codes))
        # the engine checks what comes back: every value at level 0, each level a function of the one below
        return Hierarchy.from_levels(column, levels, builder=self.name)
'''

WORKFLOW = '''\
# Uses the four plugins of __DIST__ on data/people.csv (200 synthetic records).
#   anonflow run workflow.yaml            (files go to out/, the run's record to ./anonflow.duckdb)
#   anonflow run workflow.yaml --set grouped.k=10
name: __NAME__-demo
seed: 1
sources:
  people: {path: data/people.csv}       # relative to this file
steps:
  typed:
    uses: typing
    input: people
    with:
      quasi: {age: continuous, zip: nominal, sex: nominal}
      sensitive: [disease]
  hier:
    uses: hierarchy
    input: typed
    with:
      zip: {__NAME__.prefix: [4, 3]}
  grouped:
    uses: __NAME__.sorted-groups
    input: hier
    with: {k: 5}
  scores:
    uses: evaluate
    input: [typed, grouped]
    with:
      metrics: [__NAME__.class-size, k-anonymity]
      thresholds: {__NAME__.class-size.normalized: {max: 2}}
  published:
    uses: publish
    input: grouped
    with: {publisher: __NAME__.jsonl, path: __NAME__-demo.jsonl}
'''

TESTS = '''\
"""Tests of the __DIST__ plugins, with anonflow.testing.

They work whether or not the package is installed: testing.registry / use_plugins add the
module to the installed plugins unless its entry point has loaded it already.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import __PKG__
from __PKG__ import AverageClassSize, JsonLines, Prefix, SortedGroups
from anonflow import testing
from anonflow.api import CLASS, ROW, InputError, Output

HERE = Path(__file__).resolve().parents[1]


def people(n: int = 23) -> "testing.TypedTable":
    """n records with a fixed, irregular pattern of values."""
    return testing.typed_table(
        {"age": [20 + (i * 7) % 50 for i in range(n)],
         "zip": [["13053", "13068", "14850", "14853"][(i * 3) % 4] for i in range(n)],
         "sex": ["FM"[(i * 5) % 3 % 2] for i in range(n)],
         "disease": [["flu", "asthma", "migraine"][i % 3] for i in range(n)]},
        quasi={"age": "continuous", "zip": "nominal", "sex": "nominal"}, sensitive={"disease": "nominal"})


def test_every_plugin_is_registered():
    reg = testing.registry(__PKG__)
    for kind, name in [("algorithm", "__NAME__.sorted-groups"), ("metric", "__NAME__.class-size"),
                       ("publisher", "__NAME__.jsonl"), ("hierarchy", "__NAME__.prefix")]:
        assert reg.has(kind, name), (kind, name)


@pytest.mark.parametrize("n,k", [(23, 2), (23, 5), (23, 7), (23, 23), (200, 5)])
def test_the_algorithm_output_is_k_anonymous(n, k):
    table = people(n)
    out = testing.check_claims(SortedGroups(), table, {"k": k})   # runs it, checks its claim
    assert out.claims == {"k-anonymity": {"k": k}}
    published = Counter(zip(*(out.column(c).to_pylist() for c in ("age", "zip", "sex"))))
    assert min(published.values()) >= k
    sizes = Counter(out.column(CLASS).to_pylist())
    assert min(sizes.values()) >= k and max(sizes.values()) < 2 * k
    assert sorted(out.column(ROW).to_pylist()) == list(range(n))


def test_the_algorithm_publishes_group_means_and_common_levels():
    table = testing.typed_table({"age": [30, 32, 40, 44], "zip": ["13053", "13068", "14850", "14850"]},
                                quasi={"age": "continuous", "zip": "nominal"})
    h = Prefix().build("zip", pa.array(["13053", "13068", "14850"]), {"keep": [4, 3]}, testing.make_context())
    out = testing.check_claims(SortedGroups(), table.replace(hierarchies={"zip": h}), {"k": 2})
    assert out.column("age").to_pylist() == [31.0, 31.0, 42.0, 42.0]
    assert out.column("zip").to_pylist() == ["130*", "130*", "14850", "14850"]
    plain = testing.check_claims(SortedGroups(), table, {"k": 2})   # no hierarchy: equal, else *
    assert plain.column("zip").to_pylist() == ["*", "*", "14850", "14850"]


def test_the_algorithm_rejects_a_k_larger_than_the_table():
    with pytest.raises(InputError, match="larger than the table"):
        testing.check_claims(SortedGroups(), people(3), {"k": 5})


def test_the_metric_on_a_hand_computed_example():
    # classes (30, F) x 2 and (40, M) x 3: 5 records, 2 classes, average 2.5; claimed k = 2
    table = testing.typed_table({"age": [30, 30, 40, 40, 40], "sex": ["F", "F", "M", "M", "M"]},
                                quasi={"age": "continuous", "sex": "nominal"}, claims={"k-anonymity": {"k": 2}})
    metric = AverageClassSize()
    ctx = testing.make_context()
    assert metric.compute(None, table, {"k": None}, ctx) == {
        "__NAME__.class-size": 2.5, "__NAME__.class-size.classes": 2.0, "__NAME__.class-size.normalized": 1.25}
    assert metric.compute(None, table, {"k": 5}, ctx)["__NAME__.class-size.normalized"] == 0.5


def test_the_publisher_writes_one_json_object_per_record(tmp_path):
    table = testing.typed_table({"age": [31.0, 31.0, 42.5], "zip": ["130*", "130*", "14850"]},
                                quasi={"age": "continuous", "zip": "nominal"}, extra={CLASS: [0, 0, 1]})
    table = table.replace(data=table.data.drop_columns([ROW]))      # publishers never see _row
    outputs = JsonLines().publish(table, {"path": "sub/people.jsonl"}, testing.make_context(output_dir=tmp_path))
    path = tmp_path / "sub" / "people.jsonl"
    assert outputs == [Output(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), 3)]
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"age": 31.0, "zip": "130*", CLASS: 0}, {"age": 31.0, "zip": "130*", CLASS: 0},
        {"age": 42.5, "zip": "14850", CLASS: 1}]


def test_the_publisher_refuses_another_suffix():
    with pytest.raises(InputError, match=".jsonl"):
        JsonLines().check({"path": "people.csv"}, workflow_dir=HERE)


def test_the_builder_levels():
    h = Prefix().build("zip", pa.array([14850, 13053, 13068]), {"keep": [4, 3]}, testing.make_context())
    assert [h.level(i).to_pylist() for i in range(h.height + 1)] == [
        ["13053", "13068", "14850"], ["1305*", "1306*", "1485*"], ["130*", "130*", "148*"], ["*", "*", "*"]]
    h.validate("test")   # each level a function of the one below, as the engine requires
    with pytest.raises(InputError, match="decreasing"):
        Prefix().build("zip", pa.array(["13053"]), {"keep": [3, 4]}, testing.make_context())


def test_the_workflow_runs_with_all_four_plugins(tmp_path):
    with testing.use_plugins(__PKG__):
        result = testing.run_workflow(HERE / "workflow.yaml", tmp_path)
    assert result.status == "succeeded"
    assert result.metrics["scores.k-anonymity"] >= 5
    assert result.metrics["scores.__NAME__.class-size"] >= 5
    [out] = result.outputs
    assert out["rows"] == 200 and Path(out["path"]) == tmp_path / "out" / "__NAME__-demo.jsonl"
    records = [json.loads(line) for line in Path(out["path"]).read_text().splitlines()]
    assert len(records) == 200 and set(records[0]) == {"age", "zip", "sex", "disease", CLASS}
'''
