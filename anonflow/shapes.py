"""The shapes of the values a workflow file may hold, checked by pydantic with one-line errors.

Shared by the file format (:mod:`anonflow.workflow.model`, which declares every block of a
workflow file) and by the built-in steps' parameter declarations (:mod:`anonflow.steps`:
``Param(shape=ROLE_COLUMNS)``...), so that neither imports the other: the values (text
without NUL, 64-bit integers, names, references), :class:`Block` (a mapping of known keys), and
the structured parameters of the built-in steps (role columns, metric lists, thresholds, column
lists).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Callable, ClassVar, Iterable, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, PlainValidator, TypeAdapter, ValidationError, WithJsonSchema,
                      model_validator)
from pydantic_core import PydanticCustomError

from .params import suggest

#: the largest (and smallest) integer a workflow file may hold: DuckDB's and numpy's 64 bits
INT_MAX = 2**63 - 1
INT_MIN = -(2**63)
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
_NAME = re.compile(NAME_PATTERN)

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
        raise _fail(expected_text(err), err.get("input"), where) from None


_EXPECTED = {"string_type": "text", "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
             "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
             "model_attributes_type": "a mapping", "none_required": "null", "missing": "a value",
             "extra_forbidden": "no such key"}


def expected_text(err: dict) -> str:
    """What a pydantic error ``err`` expected, as the one-line messages say it."""
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
