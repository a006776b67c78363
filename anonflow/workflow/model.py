"""The workflow file format, declared once.

Every key a workflow file may hold, its type and its allowed values are declared here as
pydantic models: the top-level keys, ``resources``, ``executor``, each kind of source, and
each step -- a built-in step's ``with:`` block from that step's :class:`~anonflow.params.Param`
declarations (:data:`anonflow.steps.BUILTINS`), a plugin step's as a mapping of parameter
names to plain values (the plugin's own declaration checks them when the graph is built).

:func:`~anonflow.workflow.checking.check_workflow` validates a parsed file before any other code reads it; its error is
one line naming the file, the line (from :class:`~anonflow.safeyaml.Marks`, recorded by the YAML loader) and the
key (:mod:`anonflow.workflow.checking`). The same declaration gives the JSON Schema shipped as
``anonflow/schemas/workflow.schema.json`` and the reference tables of docs/workflows.md
(:mod:`anonflow.workflow.reference`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any, Callable, ClassVar, Optional, Union

from pydantic import ConfigDict, Discriminator, Field, PlainValidator, Tag, TypeAdapter
from pydantic_core import PydanticCustomError

from ..params import Param, ParamError
from ..shapes import (INT_MAX, Block, Name, Number, Refs, Text, Value, _choice, _fail, _int_between, _number, _say,
                      _schema, _text, plain_value, schema_of, shown)
from ..sources import is_kind as is_source_kind
from ..steps import BUILTINS

#: the largest workflow seed (the store keeps it as a signed 64-bit integer)
MAX_SEED = INT_MAX
#: ``retain:``: which of its tables the store keeps after a run (anonflow.store.purge)
RETAIN = ("all", "published", "none")
#: what the formats of file, DuckDB and PostgreSQL sources are called
FORMATS = ("csv", "parquet", "duckdb", "postgres")
#: the format of an in-memory table (a DataFrame or Arrow table handed over in Python, see
#: :mod:`anonflow.sources.inmemory`); a workflow file cannot hold one
IN_MEMORY = "arrow"
EXECUTOR_KINDS = ("local", "processes", "dask")
#: a memory size as DuckDB takes it: a number and a unit
MEMORY_PATTERN = r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$"
MEMORY_SIZE = re.compile(MEMORY_PATTERN, re.IGNORECASE)
SCHEMA_ID = "https://anonflow.invalid/schemas/workflow.schema.json"


MemorySize = _schema(lambda v: _memory(v), {"type": "string", "pattern": MEMORY_PATTERN})
Threads = _schema(_int_between(1, 1024, "{key} must be an integer from 1 to 1024, got {got}"),
                  {"type": "integer", "minimum": 1, "maximum": 1024})
ExecutorKind = _schema(_choice(EXECUTOR_KINDS), {"enum": list(EXECUTOR_KINDS)})
Workers = _schema(_int_between(1, None), {"type": "integer", "minimum": 1})
FileFormat = _schema(_choice(FORMATS[:3], "format must be one of {choices}, got {got}{hint}"), {"enum": list(FORMATS[:3])})
DuckdbFormat = _schema(_choice(("duckdb",), "format must be duckdb for a table in a DuckDB file, got {got}"),
                       {"const": "duckdb"})
PostgresFormat = _schema(_choice(("postgres",), "format must be postgres for a PostgreSQL source, got {got}"),
                         {"const": "postgres"})
MemoryFormat = _schema(_choice((IN_MEMORY,)), {"const": IN_MEMORY})
Sha256 = _schema(_text, {"type": "string", "pattern": "^[0-9a-f]{64}$"})


# -- resources and executor -------------------------------------------------------------

def _memory(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str) or not MEMORY_SIZE.match(value):
        raise _say(f"{{key}} must be a size such as 2GB or 512MB, got {shown(value)}")
    return value


class Resources(Block):
    """What the store's DuckDB may use."""

    WHAT: ClassVar[str] = "a mapping such as {memory: 2GB, threads: 4, temp_directory: tmp}"
    memory: Optional[MemorySize] = Field(
        None, description="DuckDB's memory limit, a size such as `2GB`, `512MB`, `1.5GiB`; beyond it DuckDB "
                          "spills to its temp directory (default: 80 % of the machine's memory)")
    threads: Optional[Threads] = Field(
        None, description="DuckDB's threads (default: one per core)")
    temp_directory: Optional[Text] = Field(
        None, description="where DuckDB spills: a folder inside the workflow's folder (default: the system's "
                          "temp folder)")


class Executor(Block):
    WHAT: ClassVar[str] = "local, processes:N, dask[:ADDRESS] or a mapping with kind, workers, address, work_dir"
    kind: ExecutorKind = Field(
        "local", description="`local`, `processes` or `dask`")
    workers: Optional[Workers] = Field(
        None, description="how many worker processes")
    address: Optional[Text] = Field(None, description="refused: only the person running anonflow names a scheduler "
                                                       "(`--executor dask:ADDRESS`, `executor=`), never a workflow file")
    work_dir: Optional[Text] = Field(None, description="the folder fragments travel through, inside the "
                                                       "workflow's folder")


def _executor(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if not isinstance(value, dict):
        raise _fail(Executor.WHAT, value)
    return Executor.model_validate(value)


# -- sources -----------------------------------------------------------------------------

def _figure(value: Any) -> Any:
    if isinstance(value, str):  # YAML 1.1 reads 1e-6 as text
        try:
            float(value)
        except ValueError:
            pass
        else:
            raise _say(f"{{key}} must be a number, got the text {shown(value)} (YAML reads a number with an "
                       "exponent as text unless it has a point: write 1.0e-6)")
    return _number(value)


def _epsilon(value: Any) -> Any:
    value = _figure(value)
    if value <= 0:
        raise _say(f"{{key}} must be a number > 0, got {shown(value)}")
    return value


def _delta(value: Any) -> Any:
    value = _figure(value)
    if not 0 <= value < 1:
        raise _say(f"{{key}} must be a number in [0, 1), got {shown(value)}")
    return value


Epsilon = _schema(_epsilon, {"type": "number", "exclusiveMinimum": 0})
Delta = _schema(_delta, {"type": "number", "minimum": 0, "exclusiveMaximum": 1})


class Budget(Block):
    """The differential privacy a source may spend, across runs (the store's privacy ledger)."""

    WHAT: ClassVar[str] = "{epsilon: NUMBER, delta: NUMBER}"
    KIND: ClassVar[str] = "a privacy budget"
    epsilon: Epsilon = Field(
        description="the ε all differentially private steps of all runs may spend on the source's content, in all")
    delta: Optional[Delta] = Field(
        None, description="the δ they may spend in all (default 0: only pure ε-DP losses fit)")


BUDGET_FIELD = Field(None, description="the differential privacy runs may spend on this source's content "
                                       "(docs/differential-privacy.md)")


class FileSource(Block):
    """A CSV or Parquet file (or a DuckDB file, with ``table``)."""

    WHAT: ClassVar[str] = "{path: FILE} or {table: NAME, db: FILE}"
    KIND: ClassVar[str] = "a file source"
    path: Text = Field(description="a CSV (`.csv`, `.tsv`, `.txt`) or Parquet (`.parquet`) file, relative to "
                                   "the workflow file")
    format: Optional[FileFormat] = Field(
        None, description="`csv`, `parquet` or `duckdb` when the extension does not tell")
    delimiter: Optional[Text] = Field(None, description="CSV field separator (DuckDB's sniffer decides when absent)")
    header: Optional[bool] = Field(None, description="whether the CSV's first line names the columns")
    quote: Optional[Text] = Field(None, description="CSV quote character")
    na_values: Optional[Union[Text, list[Text]]] = Field(None, description="strings read as missing values")
    types: Optional[dict[Text, Text]] = Field(None, description="column -> DuckDB type, e.g. `{zip: VARCHAR}`")
    description: Optional[Text] = Field(None, description="free text, recorded with the workflow")
    budget: Optional[Budget] = BUDGET_FIELD


class DuckdbSource(Block):
    WHAT: ClassVar[str] = "{table: NAME, db: FILE}"
    KIND: ClassVar[str] = "a DuckDB source"
    table: Text = Field(description="a table in a DuckDB database file")
    db: Optional[Text] = Field(None, description="the DuckDB database file")
    path: Optional[Text] = Field(None, description="the DuckDB database file (as `db`)")
    format: Optional[DuckdbFormat] = Field(None, description="`duckdb`")
    description: Optional[Text] = Field(None, description="free text, recorded with the workflow")
    budget: Optional[Budget] = BUDGET_FIELD


class PostgresSource(Block):
    WHAT: ClassVar[str] = "{postgres: URL, table: NAME} or {postgres: URL, query: SELECT ...}"
    KIND: ClassVar[str] = "a postgres source"
    postgres: Text = Field(description="a PostgreSQL database, as a libpq URL without a password")
    table: Optional[Text] = Field(None, description="with `postgres`: a table, `NAME` or `SCHEMA.NAME`")
    query: Optional[Text] = Field(None, description="with `postgres`: one SELECT whose records are the source")
    timeout: Optional[Union[Text, Number]] = Field(
        None, description="how long the source's statement may run, e.g. `30s`, `10min` (a number alone is "
                          "seconds; default 15min): PostgreSQL's statement_timeout")
    format: Optional[PostgresFormat] = Field(None, description="`postgres`")
    description: Optional[Text] = Field(None, description="free text, recorded with the workflow")
    budget: Optional[Budget] = BUDGET_FIELD


class MemorySource(Block):
    """An in-memory table given in Python (``anonflow.Workflow``): never in a workflow file."""

    format: MemoryFormat = Field(
        description=f"`{IN_MEMORY}`: an in-memory table, given in Python (never in a workflow file)")
    sha256: Sha256 = Field(
        description="with `format: arrow` only: the content hash of an in-memory table")
    description: Optional[Text] = None
    budget: Optional[Budget] = BUDGET_FIELD


class OwnSource(Block):
    """A source of a kind that checks its own keys when it parses its declaration
    (:mod:`anonflow.sources`: ``parquet-dataset``, or a kind a plugin registers)."""

    model_config = ConfigDict(**{**Block.model_config, "extra": "allow"})
    WHAT: ClassVar[str] = "{format: KIND, ...}"
    format: Text = Field(description="`parquet-dataset`, or a source kind a plugin registers: the kind checks "
                                     "its other keys itself")
    budget: Optional[Budget] = BUDGET_FIELD


def _source_kind(value: Any) -> str:
    if isinstance(value, str):
        return "kind=path"
    if not isinstance(value, dict):
        return "kind=file"
    if value.get("format") not in (*FORMATS, IN_MEMORY, None) and is_source_kind(value.get("format")):
        return "kind=own"
    if "postgres" in value or value.get("format") == "postgres":
        return "kind=postgres"
    if value.get("format") == IN_MEMORY or "sha256" in value:
        return "kind=memory"
    if "table" in value or "db" in value or value.get("format") == "duckdb":
        return "kind=duckdb"
    return "kind=file"


Source = Annotated[Union[Annotated[Text, Tag("kind=path")], Annotated[FileSource, Tag("kind=file")],
                         Annotated[DuckdbSource, Tag("kind=duckdb")], Annotated[PostgresSource, Tag("kind=postgres")],
                         Annotated[MemorySource, Tag("kind=memory")], Annotated[OwnSource, Tag("kind=own")]],
                   Discriminator(_source_kind)]


# -- steps -------------------------------------------------------------------------------

def param_json_schema(p: Param) -> dict[str, Any]:
    """The JSON Schema of a declared parameter's value."""
    if p.shape is not None:
        out = schema_of(p.shape)
    else:
        out = _kind_schema(p.kind, p)
        if p.kind == "list" and p.items:
            out["items"] = _kind_schema(p.items, None)
    if p.choices:
        out = {"enum": list(p.choices)}
    if p.nullable or (not p.required and p.default is None):
        out = {"anyOf": [out, {"type": "null"}]}
    if p.help:
        out["description"] = p.help
    if not p.required:
        out["default"] = p.default
    return out


def _kind_schema(kind: str, p: Param | None) -> dict[str, Any]:
    out: dict[str, Any] = {"int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"},
                           "bool": {"type": "boolean"}, "list": {"type": "array"}, "dict": {"type": "object"},
                           "step": {"type": "string", "minLength": 1}}.get(kind, {})
    if p is not None and kind in ("int", "float"):
        if p.min is not None:
            out["minimum"] = p.min
        if p.above is not None:
            out["exclusiveMinimum"] = p.above
        if p.max is not None:
            out["maximum"] = p.max
    return dict(out)


def _param_validator(p: Param) -> Callable[[Any], Any]:
    adapter = TypeAdapter(p.shape) if p.shape is not None else None

    def check(value: Any) -> Any:
        plain_value(value)
        if adapter is not None:
            if value is None and not p.required:
                return value
            adapter.validate_python(value, strict=True)
            return value
        try:
            p.coerce(value)
        except ParamError as exc:
            raise _say(str(exc)) from None
        return value
    return check


def _with_model(uses: str, params: tuple[Param, ...], open_: bool = False) -> type[Block]:
    """The ``with:`` block of built-in step ``uses``, from its parameter declarations."""
    fields: dict[str, Any] = {}
    for i, p in enumerate(params):
        t = _schema(_param_validator(p), lambda p=p: param_json_schema(p))
        fields[f"p{i}"] = (t, Field(... if p.required else None, alias=p.name, description=p.help))
    from pydantic import create_model

    model = create_model(f"With_{uses}", __base__=OpenBlock if open_ else Block, **fields)  # type: ignore
    model.WHAT = f"a mapping of {uses} parameters"
    return model


class OpenBlock(Block):
    """A block that also takes keys it does not declare (a publish step's publisher parameters:
    :func:`_publish_with` checks them as plain values)."""

    model_config = ConfigDict(extra="allow")


class StepBase(Block):
    WHAT: ClassVar[str] = "a mapping with 'uses', 'input' and 'with'"
    uses: Any = Field(description="the built-in step or plugin to run")  # each kind of step narrows it
    input: Optional[Refs] = Field(None, description="the sources or steps whose tables the step reads: a name, "
                                                    "or a list of names")
    after: Optional[Refs] = Field(None, description="steps that must run first (ordering without data flow)")
    with_: Any = Field(None, alias="with")
    description: Optional[Text] = Field(None, description="free text")


def _uses_is(name: str) -> Any:
    return Field(description="a built-in step or an algorithm plugin", json_schema_extra={"const": name})


PLUGIN_WITH = dict[Annotated[str, PlainValidator(_text)], Value]


def builtin_steps() -> dict[str, Any]:
    """The built-in steps and their parameter declarations (:data:`anonflow.steps.BUILTINS`)."""
    return BUILTINS


@lru_cache(maxsize=1)
def step_models() -> dict[str, type[Block]]:
    """One model per built-in step (``uses`` fixed, ``with`` from its parameters) and
    ``plugin`` (any other ``uses``: an algorithm plugin, whose parameters its declaration checks)."""
    from pydantic import create_model

    out: dict[str, type[Block]] = {}
    for uses, b in BUILTINS.items():
        if uses == "hierarchy":
            with_t: Any = dict[Name, Annotated[dict[Name, Value], Field(min_length=1, max_length=1)]]
            with_t = _schema(_hierarchy_with, {"type": "object", "minProperties": 1, "additionalProperties": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "description": "{builder: parameters}, e.g. {interval: [5, 10, 20]} or {arx: hierarchy.csv}"}})
        else:
            with_t = _with_model(uses, b.params, open_=(uses == "publish"))
            if uses == "publish":
                with_t = _schema(_publish_with(with_t), lambda m=with_t: schema_of(m) | {"additionalProperties": True})
        required = any(p.required for p in b.params) or uses == "hierarchy"
        out[uses] = create_model(
            f"Step_{uses}", __base__=StepBase,
            uses=(_schema(_choice((uses,)), {"const": uses}), Field(description=b.description)),
            with_=(with_t if required else Optional[with_t],
                   Field(... if required else None, alias="with", description=f"the parameters of {uses}")),
        )
    out["plugin"] = create_model(
        "Step_plugin", __base__=StepBase,
        uses=(_schema(_text, {"type": "string", "not": {"enum": list(BUILTINS)}}),
              Field(description="the built-in step or plugin to run")),
        with_=(Optional[PLUGIN_WITH], Field(None, alias="with", description="parameters: a built-in step's (below), "
                                                                             "or a plugin's, checked against its "
                                                                             "declaration")),
    )
    return out


def _hierarchy_with(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise _say("name at least one column: {column: {builder: parameters}}, e.g. age: {interval: [5, 10, 20]}")
    for column, spec in value.items():
        if not isinstance(column, str):
            raise _say(f"{{key}} has the key {shown(column)}; column names are text")
        if "\0" in column:
            raise _say(f"column {shown(column)} holds a NUL character")
        if not isinstance(spec, dict) or len(spec) != 1:
            raise _say("expected {builder: parameters}, e.g. {interval: [5, 10, 20]} or {arx: hierarchy.csv}, "
                       f"got {shown(spec)}", (column,))
        (builder, params), = spec.items()
        if not isinstance(builder, str) or "\0" in builder:
            raise _fail("a hierarchy builder's name", builder, (column,))
        try:
            plain_value(params)
        except PydanticCustomError as exc:
            raise PydanticCustomError(exc.type, exc.message_template,
                                      {**(exc.context or {}), "at": (column, builder, *exc.context.get("at", ()))}) \
                from None
    return value


def _publish_with(model: type[Block]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        model.model_validate(value)
        plain_value(value)
        return value
    return check


def _step_kind(value: Any) -> str:
    uses = value.get("uses") if isinstance(value, dict) else None
    return f"uses={uses}" if isinstance(uses, str) and uses in BUILTINS else "uses=plugin"


@lru_cache(maxsize=1)
def workflow_model() -> type[Block]:
    """The model of a whole workflow file."""
    from pydantic import create_model

    models = step_models()
    step_t = Annotated[Union[tuple(Annotated[m, Tag(f"uses={k}")] for k, m in models.items())],  # type: ignore
                       Discriminator(_step_kind)]
    steps_t = _schema(_steps_check(TypeAdapter(dict[Name, step_t])), lambda: schema_of(dict[Name, step_t]) | {"minProperties": 1, "additionalProperties": False})
    return create_model(
        "Workflow", __base__=Block,
        __doc__="An anonflow workflow file.",
        name=(Optional[WorkflowName],
              Field(None, description="the workflow's name; defaults to the file name; one printable line, "
                                      "<= 200 characters")),
        description=(Optional[Text], Field(None, description="free text")),
        seed=(_schema(_int_between(0, MAX_SEED, "{key} must be an integer from 0 to "
                                   f"{MAX_SEED} (2^63 - 1), got {{got}}"),
                      {"type": "integer", "minimum": 0, "maximum": MAX_SEED}),
              Field(0, description="integer 0 .. 2^63 - 1 (default 0); every step's randomness derives from it")),
        resources=(Optional[Resources], Field(None, description="what the store's DuckDB may use")),
        executor=(Optional[_schema(_executor, lambda: {"anyOf": [
            {"type": "string", "pattern": r"^(local|processes(:\d+)?|dask(:.+)?)$"},
            schema_of(Executor)]})],
            Field(None, description="where the fragments of a partitioned table run")),
        retain=(_schema(_choice(RETAIN, "{key} must be one of " + ", ".join(RETAIN) +
                                " (what the store keeps of a run's tables), got {got}{hint}"), {"enum": list(RETAIN)}),
                Field("all", description="what the store keeps of a run's tables once it ends")),
        sources=(Optional[dict[Name, Source]], Field(None, description="named input tables")),
        steps=(steps_t, Field(description="named steps, in any order: the graph decides the order")),
    )


def top_level_keys() -> tuple[str, ...]:
    """The keys a workflow file may hold at its top level, in the declaration's order."""
    return tuple(f.alias or n for n, f in workflow_model().model_fields.items())


def _one_line(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 200 or not value.isprintable():
        text = shown(value[:60] + ("..." if len(value) > 60 else "")) if isinstance(value, str) else shown(value)
        raise _say("{key} must be one line of printable characters (at most 200), got " + text)
    return value


WorkflowName = _schema(_one_line, {"type": "string", "maxLength": 200})


def _steps_check(adapter: TypeAdapter) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not isinstance(value, dict) or not value:
            raise _say("{key} must be a non-empty mapping of step name -> {uses: ..., input: ..., with: ...}")
        adapter.validate_python(value, strict=True)
        return value
    return check
