"""Output schemas: the supported JSON Schema subset, checked and applied with ``jsonschema``.

Theory of operation
-------------------
1. A structured one-shot run's ``output_schema`` must be a lossless-JSON object rooted at
   ``type: "object"`` (the core's shape check) and stay inside a small subset of JSON Schema
   2020-12 that every model provider can honour as tool parameters (ONE-2, STRUCT-1). A schema
   outside it is rejected at start, before any child exists, with ``INVALID_ARGUMENT`` naming
   the offending keyword's path (``request.output_schema.properties.a.$ref``).
2. The subset: annotations (``title``, ``description``, ``default``, ``examples``), the
   validation keywords in ``VALIDATION_KEYWORDS``, and the subschema keywords ``properties``,
   ``items``, ``additionalProperties`` and ``anyOf``. References, conditionals and the other
   combinators are not supported.
3. The schema is then checked against the draft's metaschema by ``jsonschema`` (never by hand),
   and arguments are validated by the same library: ``schema_violations`` returns one line per
   violation, in a stable order, for the capture tool's ``invalid arguments: ...`` (STRUCT-3).
4. A schema no value can satisfy is refused too, for the contradictions a subschema can state
   on its own: an empty ``enum``, a lower bound above its upper bound (``minimum``/``maximum``,
   ``minLength``/``maxLength``, ``minItems``/``maxItems``, ``minProperties``/
   ``maxProperties``), a ``required`` name whose property schema is ``false`` or that
   ``additionalProperties: false`` excludes, and an ``anyOf`` of only ``false``. The shape
   check bounds the nesting first (the service's ``Limits``), so these walks stay shallow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from dsh_subagent.core.capabilities import validate_output_schema
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.limits import DEFAULT_LIMITS, Limits
from dsh_subagent.core.values import JsonObject, JsonValue

ANNOTATION_KEYWORDS: Final = frozenset({"title", "description", "default", "examples"})
VALIDATION_KEYWORDS: Final = frozenset(
    {
        "type",
        "enum",
        "const",
        "required",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)
SUBSCHEMA_KEYWORDS: Final = frozenset({"properties", "items", "additionalProperties", "anyOf"})
SUPPORTED_KEYWORDS: Final = ANNOTATION_KEYWORDS | VALIDATION_KEYWORDS | SUBSCHEMA_KEYWORDS


def _unsupported(field: str, why: str) -> Exception:
    return invalid(field, f"unsupported JSON schema: {why}")


def _check_subset(schema: JsonValue, field: str) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise _unsupported(field, "a subschema must be an object or a boolean")
    for key, value in schema.items():
        where = f"{field}.{key}"
        if key not in SUPPORTED_KEYWORDS:
            raise _unsupported(where, f"keyword {key!r} is outside the supported subset")
        if key == "properties":
            if not isinstance(value, Mapping):
                raise _unsupported(where, "properties must be an object")
            for name, sub in value.items():
                _check_subset(sub, f"{where}.{name}")
        elif key in ("items", "additionalProperties"):
            _check_subset(value, where)
        elif key == "anyOf":
            if isinstance(value, str) or not isinstance(value, Sequence) or not value:
                raise _unsupported(where, "anyOf must be a non-empty array")
            for index, sub in enumerate(value):
                _check_subset(sub, f"{where}[{index}]")


_BOUNDS: Final = (
    ("minimum", "maximum"),
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("minProperties", "maxProperties"),
)


def _number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_satisfiable(schema: JsonValue, field: str) -> None:
    # Rule 4; runs after the metaschema check, so every keyword has its documented shape.
    if not isinstance(schema, Mapping):
        return
    if schema.get("enum") == []:
        raise invalid(f"{field}.enum", "unsatisfiable JSON schema: enum is empty")
    for low, high in _BOUNDS:
        lower, upper = schema.get(low), schema.get(high)
        if _number(lower) and _number(upper) and lower > upper:  # type: ignore[operator]
            raise invalid(f"{field}.{low}", f"unsatisfiable JSON schema: {low} > {high}")
    properties = schema.get("properties", {})
    assert isinstance(properties, Mapping)
    closed = schema.get("additionalProperties") is False
    required = schema.get("required", ())
    assert isinstance(required, Sequence)
    for name in required:
        assert isinstance(name, str)
        if properties.get(name) is False or (closed and name not in properties):
            raise invalid(
                f"{field}.required", f"unsatisfiable JSON schema: {name!r} cannot be present"
            )
    for name, sub in properties.items():
        _check_satisfiable(sub, f"{field}.properties.{name}")
    for key in ("items", "additionalProperties"):
        if key in schema:
            _check_satisfiable(schema[key], f"{field}.{key}")
    options = schema.get("anyOf", ())
    assert isinstance(options, Sequence)
    if options and all(option is False for option in options):
        raise invalid(f"{field}.anyOf", "unsatisfiable JSON schema: every option is false")
    for index, option in enumerate(options):
        _check_satisfiable(option, f"{field}.anyOf[{index}]")


def check_output_schema(
    schema: object, field: str = "request.output_schema", limits: Limits = DEFAULT_LIMITS
) -> JsonObject:
    """Return ``schema`` once it is an object-rooted, satisfiable schema inside the subset.

    Raises ``SubagentError(INVALID_ARGUMENT)`` naming the field otherwise.
    """
    validate_output_schema(schema, field, limits)
    assert isinstance(schema, Mapping)  # validate_output_schema proved it
    _check_subset(schema, field)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        path = "".join(f".{part}" for part in error.path)
        raise _unsupported(f"{field}{path}", str(error.message)) from error
    _check_satisfiable(schema, field)
    return schema


def schema_violations(schema: JsonObject, value: JsonValue) -> tuple[str, ...]:
    """Every way ``value`` violates ``schema`` (a checked schema), one line each, sorted."""
    validator = Draft202012Validator(schema)
    lines = []
    for error in validator.iter_errors(value):
        path = "/".join(str(part) for part in error.absolute_path)
        lines.append(f"{path or '<root>'}: {error.message}")
    return tuple(sorted(lines))


__all__ = [
    "ANNOTATION_KEYWORDS",
    "SUBSCHEMA_KEYWORDS",
    "SUPPORTED_KEYWORDS",
    "VALIDATION_KEYWORDS",
    "check_output_schema",
    "schema_violations",
]
