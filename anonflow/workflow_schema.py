"""The workflow file format, declared once.

Every key a workflow file may hold, its type and its allowed values are declared here as
pydantic models: the top-level keys, ``resources``, ``executor``, each kind of source, and
each step -- a built-in step's ``with:`` block from that step's :class:`~anonflow.params.Param`
declarations (:data:`anonflow.steps.BUILTINS`), a plugin step's as a mapping of parameter
names to plain values (the plugin's own declaration checks them when the graph is built).

:func:`check_workflow` validates a parsed file before any other code reads it; its error is
one line naming the file, the line (from :class:`Marks`, recorded by the YAML loader) and the
key. The same declaration gives the JSON Schema shipped as ``anonflow/schemas/workflow.schema.json``
(:func:`json_schema`; ``anonflow schema`` prints it) and the reference tables of
docs/workflows.md (:func:`reference_tables`).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Annotated, Any, Callable, ClassVar, Iterable, Optional, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, TypeAdapter,
                      ValidationError, WithJsonSchema, model_validator)
from pydantic_core import PydanticCustomError

from .params import Param, ParamError, suggest

#: the largest (and smallest) integer a workflow file may hold: DuckDB's and numpy's 64 bits
INT_MAX = 2**63 - 1
INT_MIN = -(2**63)
#: the largest workflow seed (the store keeps it as a signed 64-bit integer)
MAX_SEED = INT_MAX
#: ``retain:``: which of its tables the store keeps after a run (anonflow.retention)
RETAIN = ("all", "published", "none")
#: what the formats of file, DuckDB and PostgreSQL sources are called
FORMATS = ("csv", "parquet", "duckdb", "postgres")
#: the format of an in-memory table (a DataFrame or Arrow table handed over in Python, see
#: :mod:`anonflow.memtable`); a workflow file cannot hold one
IN_MEMORY = "arrow"
EXECUTOR_KINDS = ("local", "processes", "dask")
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
_NAME = re.compile(NAME_PATTERN)
#: a memory size as DuckDB takes it: a number and a unit
MEMORY_PATTERN = r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$"
MEMORY_SIZE = re.compile(MEMORY_PATTERN, re.IGNORECASE)
SCHEMA_ID = "https://anonflow.invalid/schemas/workflow.schema.json"


# -- values ------------------------------------------------------------------------------

def shown(value: Any, limit: int = 60) -> str:
    """``value`` as an error message shows it: its repr (control characters escaped), cut short."""
    text = repr(value)
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


def _fail(expected: str, value: Any, at: tuple = ()) -> PydanticCustomError:
    return PydanticCustomError("expected", "expected {expected}, got {got}",
                               {"expected": expected, "got": shown(value), "at": at})


def _say(message: str, at: tuple = ()) -> PydanticCustomError:
    """An error whose message is written out (``{key}`` in it is replaced by the key's name)."""
    return PydanticCustomError("said", "{message}", {"message": message, "at": at})


def _what(value: Any) -> str | None:
    """Why ``value`` cannot be in a workflow file, or None."""
    if isinstance(value, str):
        return "text with a NUL character" if "\0" in value else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if INT_MIN <= value <= INT_MAX else "an integer beyond 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else "a number that is not finite"
    if isinstance(value, (list, dict)):
        return None
    return f"a {type(value).__name__} (quote it to make it text)"


def plain_value(value: Any) -> Any:
    """Check a value of any shape: text without NUL, booleans, 64-bit integers, finite numbers,
    null, and lists and mappings (keys text or integers) of these."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, at = stack.pop()
        why = _what(item)
        if why is not None:
            raise _say(f"{{key}} holds {why}: {shown(item)}", at)
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, bool) or not isinstance(k, (str, int)) or _what(k) is not None:
                    raise _say(f"{{key}} has the key {shown(k)}; keys are text", at)
                stack.append((v, (*at, k)))
        elif isinstance(item, list):
            stack.extend((v, (*at, i)) for i, v in enumerate(item))
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _fail("text", value)
    if "\0" in value:
        raise _say(f"{{key}} holds a NUL character: {shown(value)}")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise _say(f"names start with a letter or '_' and hold letters, digits, '_' or '-', got {shown(value)}")
    return value


def _ref(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail("the name of a source or step", value)
    return _text(value)


def _refs(value: Any) -> Any:
    if isinstance(value, str):
        return _ref(value)
    if not isinstance(value, list):
        raise _fail("a source or step name, or a list of them", value)
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v.strip() or "\0" in v:
            raise _fail("a source or step name", v, (i,))
    return value


def _int_between(lo: int | None, hi: int | None, message: str | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        ok = not isinstance(value, bool) and isinstance(value, int) and (lo is None or value >= lo) \
            and (hi is None or value <= hi)
        if not ok:
            if message:
                raise _say(message.format(got=shown(value), key="{key}"))
            bound = f" from {lo} to {hi}" if lo is not None and hi is not None else f" >= {lo}" if lo is not None else ""
            raise _fail(f"an integer{bound}", value)
        return value
    return check


def _choice(values: Iterable[str], message: str | None = None) -> Callable[[Any], str]:
    values = tuple(values)

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in values:
            hint = suggest(value, values) if isinstance(value, str) else ""
            text = message or "{key} must be one of {choices}, got {got}{hint}"
            raise _say(text.format(choices=", ".join(values), got=shown(value), hint=hint, key="{key}"))
        return value
    return check


class _LazySchema:
    """A JSON Schema computed only when one is generated (``anonflow schema``, the docs): a
    validation never pays for it."""

    def __init__(self, make: Callable[[], dict[str, Any]]) -> None:
        self.make = make

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return self.make()


def _schema(validator: Callable[[Any], Any], schema: dict[str, Any] | Callable[[], dict[str, Any]]) -> Any:
    """A type checked by ``validator`` whose JSON Schema is ``schema`` (or what it returns)."""
    if callable(schema):
        return Annotated[Any, PlainValidator(validator), _LazySchema(schema)]
    return Annotated[Any, PlainValidator(validator), WithJsonSchema(schema)]


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail("a number", value)
    why = _what(value)
    if why is not None:
        raise _say(f"{{key}} holds {why}: {shown(value)}")
    return value


Text = _schema(_text, {"type": "string"})
Number = _schema(_number, {"type": "number"})
Name = _schema(_name, {"type": "string", "pattern": NAME_PATTERN})
Refs = _schema(_refs, {"anyOf": [{"type": "string", "minLength": 1},
                                 {"type": "array", "items": {"type": "string", "minLength": 1}}]})
Value = _schema(plain_value, {})


def inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` to its own ``$defs`` written out (the declaration has no
    recursive models), so it can be embedded in another schema."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**walk(defs[ref[len("#/$defs/"):]]), **walk(rest)}
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    return walk(schema)


def schema_of(t: Any) -> dict[str, Any]:
    """The JSON Schema of type ``t``, inlined (:func:`inline`)."""
    return inline(TypeAdapter(t).json_schema(by_alias=True))


# -- blocks ------------------------------------------------------------------------------

class Block(BaseModel):
    """A mapping of known keys: an unknown key (with a "did you mean") or a missing required
    key is one error naming it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
    #: how the block is described in "expected ..." messages
    WHAT: ClassVar[str] = "a mapping"
    #: what the block is, in an unknown key's message ("a postgres source takes ...")
    KIND: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise _fail(cls.WHAT, data)
        fields = {(f.alias or n): f for n, f in cls.model_fields.items()}
        extra = cls.model_config.get("extra") == "allow"
        for key in data:
            if not isinstance(key, str):
                raise _say(f"{{key}} has the key {shown(key)}; keys are text")
            if key not in fields and not extra:
                raise PydanticCustomError("said", "{message}", {
                    "message": f"unknown key {key!r}{suggest(key, fields)}; "
                               + (f"{cls.KIND} takes " if cls.KIND else "expected one of ") + ", ".join(fields),
                    "line_at": (key,)})
        for key, f in fields.items():
            if f.is_required() and key not in data:
                raise _say(f"missing {key!r}" + (f" ({f.description})" if f.description else ""))
        return data


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


class DuckdbSource(Block):
    WHAT: ClassVar[str] = "{table: NAME, db: FILE}"
    KIND: ClassVar[str] = "a DuckDB source"
    table: Text = Field(description="a table in a DuckDB database file")
    db: Optional[Text] = Field(None, description="the DuckDB database file")
    path: Optional[Text] = Field(None, description="the DuckDB database file (as `db`)")
    format: Optional[DuckdbFormat] = Field(None, description="`duckdb`")
    description: Optional[Text] = Field(None, description="free text, recorded with the workflow")


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


class MemorySource(Block):
    """An in-memory table given in Python (``anonflow.Workflow``): never in a workflow file."""

    format: MemoryFormat = Field(
        description=f"`{IN_MEMORY}`: an in-memory table, given in Python (never in a workflow file)")
    sha256: Sha256 = Field(
        description="with `format: arrow` only: the content hash of an in-memory table")
    description: Optional[Text] = None


def _source_kind(value: Any) -> str:
    if isinstance(value, str):
        return "kind=path"
    if not isinstance(value, dict):
        return "kind=file"
    if "postgres" in value or value.get("format") == "postgres":
        return "kind=postgres"
    if value.get("format") == IN_MEMORY or "sha256" in value:
        return "kind=memory"
    if "table" in value or "db" in value or value.get("format") == "duckdb":
        return "kind=duckdb"
    return "kind=file"


Source = Annotated[Union[Annotated[Text, Tag("kind=path")], Annotated[FileSource, Tag("kind=file")],
                         Annotated[DuckdbSource, Tag("kind=duckdb")], Annotated[PostgresSource, Tag("kind=postgres")],
                         Annotated[MemorySource, Tag("kind=memory")]], Discriminator(_source_kind)]


# -- the shapes of the built-in steps' structured parameters ------------------------------

TYPES = ("continuous", "ordinal", "nominal", "semantic")
TypeName = _schema(_choice(TYPES, "type must be one of {choices}, got {got}{hint}"), {"enum": list(TYPES)})


def _column(value: Any, at: tuple = ()) -> Any:
    """A column name: text, or an integer (YAML reads a column named 2019 as one)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail("a column name", value, at)
    if isinstance(value, str) and "\0" in value:
        raise _say(f"{{key}} holds a NUL character: {shown(value)}", at)
    return value


class TypeSpec(Block):
    """A column's type with its settings."""

    WHAT: ClassVar[str] = "a type name or {type: ..., order: [...]}"
    type: Optional[TypeName] = Field(None, description="continuous, ordinal, nominal or semantic (none: inferred)")
    order: Optional[Annotated[list[Value], Field(min_length=2)]] = Field(
        None, description="ordinal: the categories, lowest first")
    weights: Optional[list[Number]] = Field(
        None, description="ordinal: the step weights between consecutive categories")
    beta: Optional[Number] = Field(None, description="semantic: the code tree's level weight exponent")
    w12: Optional[Number] = Field(None, description="semantic: the weight W(1,2)")
    grading: Optional[Union[Text, dict[Annotated[str, PlainValidator(_text), WithJsonSchema({"type": "string"})],
                                       Value]]] = Field(
        None, description="a sensitive attribute's sensitivity grading: a YAML file, or the grading inline")


def _type_value(value: Any, at: tuple) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if "\0" in value:
            raise _say(f"{{key}} holds a NUL character: {shown(value)}", at)
        try:
            _choice(TYPES, "type must be one of {choices}, got {got}{hint}")(value)
        except PydanticCustomError as exc:
            raise PydanticCustomError(exc.type, exc.message_template, {**(exc.context or {}), "at": at}) from None
        return
    if not isinstance(value, dict):
        raise _fail("a type name or {type: ..., order: [...]}", value, at)
    try:
        TypeSpec.model_validate(value, strict=True)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        ctx = err.get("ctx") or {}
        where = (*at, *[k for k in err["loc"] if k in value or isinstance(k, int)][:1], *tuple(ctx.get("at") or ()))
        if err["type"] == "said":
            raise _say(ctx["message"], where) from None
        raise _fail(_expected(err), err.get("input"), where) from None


def role_columns(value: Any) -> Any:
    """A role's columns: a column, a list of columns (each a name or {name: type}), or a
    mapping column -> type (a type name, {type: ..., order: [...]}, or null: inferred)."""
    if value is None:
        return value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return _column(value)
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                for k, v in item.items():
                    _column(k, (i,))
                    _type_value(v, (i, k))
            else:
                _column(item, (i,))
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            _column(k)
            _type_value(v, (k,))
        return value
    raise _fail("a list of columns or a mapping column -> type", value)


def _role_columns_schema() -> dict[str, Any]:
    column: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    typed: dict[str, Any] = {"type": "object", "additionalProperties": {
        "anyOf": [{"type": "null"}, {"enum": list(TYPES)}, schema_of(TypeSpec)]}}
    return {"anyOf": [column, {"type": "array", "items": {"anyOf": [column, typed]}}, typed, {"type": "null"}]}


ROLE_COLUMNS = Annotated[Any, PlainValidator(role_columns), _LazySchema(_role_columns_schema)]


def metric_list(value: Any) -> Any:
    """``metrics:``: a metric name, a list of names and {name: {param: value}}, or a mapping
    name -> parameters."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        items: list[tuple[tuple, Any, Any]] = [((k,), k, v) for k, v in value.items()]
    elif isinstance(value, list):
        items = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                items.append(((i,), item, None))
            elif isinstance(item, dict) and len(item) == 1:
                (k, v), = item.items()
                items.append(((i, k), k, v))
            else:
                raise _fail("a metric name or {name: {param: value}}", item, (i,))
    else:
        raise _fail("a metric name, a list of them, or a mapping name -> parameters", value)
    if not items:
        raise _say("{key} must name at least one metric")
    for at, name, params in items:
        if not isinstance(name, str) or "\0" in name:
            raise _fail("a metric name", name, at[:-1] if len(at) > 1 else at)
        if params is not None and not isinstance(params, dict):
            raise _fail(f"the parameters of metric {name!r}: a mapping", params, at)
        try:
            plain_value(params)
        except PydanticCustomError as exc:
            raise PydanticCustomError(exc.type, exc.message_template,
                                      {**(exc.context or {}), "at": (*at, *exc.context.get("at", ()))}) from None
    return value


_METRIC_PARAMS: dict[str, Any] = {"anyOf": [{"type": "object"}, {"type": "null"}]}
METRICS = Annotated[Any, PlainValidator(metric_list), WithJsonSchema({"anyOf": [
    {"type": "string"},
    {"type": "array", "minItems": 1, "items": {"anyOf": [
        {"type": "string"},
        {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": _METRIC_PARAMS}]}},
    {"type": "object", "minProperties": 1, "additionalProperties": _METRIC_PARAMS}]})]


class Bound(Block):
    WHAT: ClassVar[str] = "{min: number} and/or {max: number}"
    min: Optional[Number] = Field(None, description="the least value that passes")
    max: Optional[Number] = Field(None, description="the greatest value that passes")


THRESHOLDS = dict[Annotated[str, PlainValidator(_text), WithJsonSchema({"type": "string"})], Bound]
COLUMN_LIST = list[Annotated[str, PlainValidator(_text), WithJsonSchema({"type": "string"})]]


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


@lru_cache(maxsize=1)
def step_models() -> dict[str, type[Block]]:
    """One model per built-in step (``uses`` fixed, ``with`` from its parameters) and
    ``plugin`` (any other ``uses``: an algorithm plugin, whose parameters its declaration checks)."""
    from pydantic import create_model

    from .steps import BUILTINS

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
    from .steps import BUILTINS

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


# -- validation and its one-line error --------------------------------------------------

class Marks:
    """Where each key and list item of a parsed YAML file is (1-based lines), by the identity of
    the mapping or list that holds it (:func:`anonflow.spec.load_yaml_marked` records them)."""

    def __init__(self) -> None:
        self._by: dict[int, tuple[Any, Any, int]] = {}

    def add(self, container: Any, lines: Any, line: int) -> None:
        self._by[id(container)] = (container, lines, line)

    def line(self, data: Any, path: Iterable[Any]) -> int | None:
        """The line of the key (or item) at ``path`` in ``data``, or of the nearest enclosing one."""
        found = None
        node = data
        for key in path:
            entry = self._by.get(id(node))
            if entry is None or entry[0] is not node:
                break
            _, lines, own = entry
            found = found or own
            if isinstance(node, dict) and key in node:
                found = lines.get(key, found)
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                found = lines[key]
                node = node[key]
            else:
                break
        else:
            entry = self._by.get(id(node))
            if found is None and entry is not None and entry[0] is node:
                found = entry[2]
        return found


def _data_path(data: Any, loc: tuple) -> tuple:
    """``loc`` less the elements pydantic adds that are no keys of ``data`` (union tags, ``[key]``)."""
    out: list[Any] = []
    node = data
    for item in loc:
        if isinstance(node, dict) and item in node:
            out.append(item)
            node = node[item]
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            out.append(item)
            node = node[item]
    return tuple(out)


def _follow(data: Any, path: tuple) -> tuple:
    """The part of ``path`` (keys relative to an error's place) that exists in ``data``."""
    return _data_path(data, path)


def key_text(path: tuple) -> str:
    """A key path as messages show it: ``with.quasi.age``, ``metrics[2]``."""
    out = ""
    for k in path:
        if isinstance(k, int):
            out += f"[{k}]"
        elif isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", k):
            out += ("." if out else "") + k
        else:
            out += f"[{shown(k)}]"
    return out


def where_parts(path: tuple) -> tuple[list[str], tuple]:
    """The named part of a location (``step 'a'``, ``source 's'``) and the key path after it."""
    if len(path) >= 2 and path[0] in ("steps", "sources") and isinstance(path[1], str):
        return [f"{path[0][:-1]} {path[1]!r}"], tuple(path[2:])
    return [], tuple(path)


def describe_error(exc: ValidationError, data: Any) -> tuple[tuple, str, tuple]:
    """The one error to report of ``exc`` (the deepest in ``data``; alternatives at one place
    merged into one "expected A or B") as (key path in ``data``, message without the key, the
    path whose line to show)."""
    found: list[tuple[tuple, dict]] = []
    for err in exc.errors(include_url=False):
        path = _data_path(data, err["loc"])
        ctx = err.get("ctx") or {}
        at = tuple(ctx.get("at") or ())
        if at:
            node = data
            for k in path:
                node = node[k]
            path = path + _follow(node, at)
        found.append((path, err))
    deepest = max(len(p) for p, _ in found)
    here = [(p, e) for p, e in found if len(p) == deepest]
    path = here[0][0]
    said = [e for _, e in here if e["type"] == "said"]
    if said:
        ctx = said[0]["ctx"]
        node = data
        for k in path:
            node = node[k]
        return path, ctx["message"], path + _follow(node, tuple(ctx.get("line_at") or ()))
    if here[0][1]["type"] == "expected":
        return path, here[0][1]["msg"], path
    expected = []
    for _, e in here:
        text = _expected(e)
        if text not in expected:
            expected.append(text)
    node = data
    for k in path:
        node = node[k]
    return path, f"expected {' or '.join(expected)}, got {shown(here[0][1].get('input', node))}", path


_EXPECTED = {"string_type": "text", "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
             "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
             "model_attributes_type": "a mapping", "none_required": "null", "missing": "a value",
             "extra_forbidden": "no such key"}


def _expected(err: dict) -> str:
    ctx = err.get("ctx") or {}
    if err["type"] == "expected":
        return str(ctx["expected"])
    if err["type"] == "too_short":
        return f"at least {ctx.get('min_length')} item(s)"
    if err["type"] == "too_long":
        return f"at most {ctx.get('max_length')} item(s)"
    if err["type"] == "literal_error":
        return f"one of {ctx.get('expected')}"
    return _EXPECTED.get(err["type"], err["msg"].lower())


def check_data(data: Any, model: type[BaseModel] | None = None) -> None:
    """Validate parsed workflow data (raises :class:`pydantic.ValidationError`)."""
    (model or workflow_model()).model_validate(data, strict=True)


def check_workflow(data: Any, file: str, marks: Marks | None = None, *, prefix: str | None = None) -> None:
    """Validate ``data`` (a parsed workflow file) against the declaration; raise a
    :class:`~anonflow.errors.WorkflowError` in one line naming ``file``, the line (when
    ``marks`` knows it) and the key."""
    from .errors import WorkflowError

    if not isinstance(data, dict):
        raise WorkflowError("expected a mapping with keys name, seed, sources, steps, got " + shown(data), where=file)
    try:
        check_data(data)
    except ValidationError as exc:
        path, message, line_path = describe_error(exc, data)
        line = marks.line(data, line_path) if marks is not None else None
        named, rest = where_parts(path)
        where = [file] + ([prefix] if prefix else []) + ([f"line {line}"] if line else []) + named
        if "{key}" in message:
            key = (repr(rest[0]) if len(rest) == 1 else key_text(rest)) if rest else (named[0] if named else "the file")
            message = message.replace("{key}", key)
        elif rest:
            message = f"{key_text(rest)}: {message}"
        raise WorkflowError(message, where=": ".join(where)) from None


# -- the JSON Schema and the reference tables -------------------------------------------

def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a workflow file, as shipped in
    ``anonflow/schemas/workflow.schema.json``."""
    schema = workflow_model().model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "anonflow workflow", **{k: v for k, v in schema.items() if k != "title"}}


def json_schema_text() -> str:
    import json

    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(p: Param) -> str:
    if p.required:
        return "required"
    if p.default is None:
        return "none"
    import json

    return f"`{p.default}`" if isinstance(p.default, str) else f"`{json.dumps(p.default)}`"


#: the kinds of source, as the reference table names them
SOURCE_KINDS = {"file": FileSource, "DuckDB": DuckdbSource, "PostgreSQL": PostgresSource, "in-memory": MemorySource}
#: built-in steps documented in one section share one table, each row saying which step it is for
SHARED_SECTIONS = {"filter": "filter,sample", "sample": "filter,sample"}


def _key_rows(model: type[BaseModel]) -> list[str]:
    return [f"| `{f.alias or n}` | {_cell(f.description or '')} |" for n, f in model.model_fields.items()]


def reference_tables() -> dict[str, str]:
    """The Markdown tables docs/workflows.md shows between ``<!-- schema:NAME -->`` and
    ``<!-- /schema:NAME -->``: ``top`` (the top-level keys), ``resources``, ``executor`` (its
    mapping form), ``sources`` (every key of every kind of source), ``steps`` (a step's keys),
    and ``with:STEP`` for each built-in step with parameters (``with:filter,sample`` for the
    section the two share)."""
    from .steps import BUILTINS

    head = "| key | meaning |\n| --- | --- |\n"
    out = {"top": head + "\n".join(_key_rows(workflow_model())),
           "resources": head + "\n".join(_key_rows(Resources)),
           "executor": head + "\n".join(_key_rows(Executor))}
    keys: dict[str, tuple[list[str], list[str]]] = {}
    for kind, model in SOURCE_KINDS.items():
        for n, f in model.model_fields.items():
            kinds, texts = keys.setdefault(f.alias or n, ([], []))
            kinds.append(kind)
            if f.description and f.description not in texts:
                texts.append(f.description)
    out["sources"] = "| key | sources | meaning |\n| --- | --- | --- |\n" + "\n".join(
        f"| `{k}` | {', '.join(kinds) if len(kinds) < len(SOURCE_KINDS) else 'all'} | {_cell('; '.join(texts))} |"
        for k, (kinds, texts) in keys.items())
    plugin = step_models()["plugin"]
    out["steps"] = head + "\n".join(_key_rows(plugin))
    for uses, b in BUILTINS.items():
        if not b.params:
            continue
        name = "with:" + SHARED_SECTIONS.get(uses, uses)
        rows = out.get(name, "| parameter | default | meaning |\n| --- | --- | --- |").split("\n")
        rows += [f"| `{p.name}` | {_default(p)} | {_cell(p.help)} |" for p in b.params]
        if uses == "publish":
            rows.append("| other keys | | the publisher's own parameters (`path`, ...) |")
        out[name] = "\n".join(rows)
    return out


MARKER = re.compile(r"<!-- schema:(?P<name>[^ ]+) -->\n(?P<body>.*?)<!-- /schema:(?P=name) -->", re.S)


def render_docs(text: str) -> str:
    """``text`` (docs/workflows.md) with every generated table written anew from the declaration."""
    tables = reference_tables()

    def fill(m: re.Match) -> str:
        name = m["name"]
        if name not in tables:
            raise KeyError(f"docs marker schema:{name} names no generated table; known: {', '.join(tables)}")
        return f"<!-- schema:{name} -->\n{tables[name]}\n<!-- /schema:{name} -->"
    return MARKER.sub(fill, text)


def _main() -> None:  # pragma: no cover - a maintainer's command
    """``python -m anonflow.workflow_schema``: write the shipped JSON Schema and the generated
    tables of docs/workflows.md anew from the declaration."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    (here / "schemas" / "workflow.schema.json").write_text(json_schema_text(), encoding="utf-8")
    docs = here.parent / "docs" / "workflows.md"
    if docs.is_file():
        docs.write_text(render_docs(docs.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    _main()
