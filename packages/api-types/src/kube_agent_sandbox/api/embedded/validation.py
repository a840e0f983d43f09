"""Check a plain JSON value against a structural CRD schema, the way the apiserver would.

Embedded Kubernetes types are kept as dicts (see :mod:`.types`); this is what rejects a
malformed PodSpec before it reaches the cluster, with the path of every offending field. It
covers the parts of OpenAPI a structural schema uses: types, required, properties,
additionalProperties, items, enum, int-or-string, pattern, minimum/maximum and integer formats.
Unknown object fields are accepted (a newer Kubernetes may have added them) and ``null`` is
treated as absent, as the apiserver prunes it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.api.embedded.schema import QUANTITY_PATTERN

_INT_RANGES: Final = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class SchemaViolation:
    """One reason a value does not fit its schema.

    Attributes:
        path: where, e.g. ``containers[0].name`` (empty for the value itself).
        message: why.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    names.update({dict: "object", list: "array"})
    return names.get(type(value), type(value).__name__)


def _check_date_time(value: str) -> bool:
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _check_scalar(
    value: Any, schema: Mapping[str, Any], path: str, out: list[SchemaViolation]
) -> None:
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is_int(value) or isinstance(value, str)):
            message = f"must be an integer or a string, not {_type_name(value)}"
            out.append(SchemaViolation(path, message))
            return
    elif expected == "string":
        if not isinstance(value, str):
            out.append(SchemaViolation(path, f"must be a string, not {_type_name(value)}"))
            return
        if schema.get("format") == "date-time" and not _check_date_time(value):
            out.append(SchemaViolation(path, f"must be an RFC 3339 date-time, not {value!r}"))
    elif expected == "integer":
        if not _is_int(value):
            out.append(SchemaViolation(path, f"must be an integer, not {_type_name(value)}"))
            return
        low, high = _INT_RANGES.get(schema.get("format", "int64"), _INT_RANGES["int64"])
        if not low <= value <= high:
            out.append(SchemaViolation(path, f"{value} is out of range for {schema.get('format')}"))
    elif expected == "number":
        if not (_is_int(value) or isinstance(value, float)):
            out.append(SchemaViolation(path, f"must be a number, not {_type_name(value)}"))
            return
    elif expected == "boolean" and not isinstance(value, bool):
        out.append(SchemaViolation(path, f"must be a boolean, not {_type_name(value)}"))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        out.append(SchemaViolation(path, f"unsupported value {value!r}: must be one of {allowed}"))
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and isinstance(value, str) and not re.search(pattern, value):
        if pattern == QUANTITY_PATTERN:
            out.append(SchemaViolation(path, f"{value!r} is not a valid quantity"))
        else:
            out.append(SchemaViolation(path, f"{value!r} does not match {pattern}"))
    if "minimum" in schema and _is_int(value) and value < schema["minimum"]:
        out.append(SchemaViolation(path, f"must be greater than or equal to {schema['minimum']}"))
    if "maximum" in schema and _is_int(value) and value > schema["maximum"]:
        out.append(SchemaViolation(path, f"must be less than or equal to {schema['maximum']}"))


def _check(value: Any, schema: Mapping[str, Any], path: str, out: list[SchemaViolation]) -> None:
    if value is None:
        return
    expected = schema.get("type")
    if expected == "object":
        if not isinstance(value, Mapping):
            out.append(SchemaViolation(path, f"must be an object, not {_type_name(value)}"))
            return
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if value.get(name) is None:
                out.append(SchemaViolation(_join(path, name), "required field is missing"))
        extra_schema = schema.get("additionalProperties")
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(SchemaViolation(path, f"key {key!r} must be a string"))
            elif key in properties:
                _check(item, properties[key], _join(path, key), out)
            elif isinstance(extra_schema, Mapping):
                _check(item, extra_schema, _join(path, key), out)
    elif expected == "array":
        if not isinstance(value, list):
            out.append(SchemaViolation(path, f"must be an array, not {_type_name(value)}"))
            return
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _check(item, items, f"{path}[{index}]", out)
    else:
        _check_scalar(value, schema, path, out)


def validate_against_schema(value: Any, schema: Mapping[str, Any]) -> list[SchemaViolation]:
    """Return every violation of ``schema`` by ``value`` (empty when it fits).

    Args:
        value: a JSON-like value (dicts, lists, str, int, float, bool, None).
        schema: a structural schema, e.g. from
            :func:`kube_agent_sandbox.api.embedded.structural_schema`.

    Returns:
        The violations, in document order.
    """
    violations: list[SchemaViolation] = []
    _check(value, schema, "", violations)
    return violations
