"""Turn a model's pydantic JSON schema into a structural OpenAPI v3 schema for a CRD.

pydantic describes models in JSON Schema: ``$ref`` into ``$defs``, ``anyOf: [X, {type: null}]``
for optional fields, titles and descriptions, ``additionalProperties: false`` for closed models,
``default: null``. A CRD needs none of that: references are inlined, optional fields are just
absent from ``required``, and descriptions are dropped (upstream's CRDs carry none either, which
keeps the PodSpec-heavy CRDs small). What remains is deterministic for a given model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel

_DEF_PREFIX: Final = "#/$defs/"
_DROPPED: Final = frozenset({"title", "description"})
_NULL: Final = {"type": "null"}


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Inline ``$ref`` and collapse ``anyOf [X, null]`` at this node (not below)."""
    current = dict(node)
    while True:
        ref = current.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith(_DEF_PREFIX):
                raise ValueError(f"unsupported reference {ref}")
            siblings = {k: v for k, v in current.items() if k != "$ref"}
            current = {**defs[ref.removeprefix(_DEF_PREFIX)], **siblings}
            continue
        variants = current.get("anyOf")
        if isinstance(variants, list) and _NULL in variants:
            rest = [v for v in variants if v != _NULL]
            siblings = {k: v for k, v in current.items() if k != "anyOf"}
            current = {**rest[0], **siblings} if len(rest) == 1 else {**siblings, "anyOf": rest}
            continue
        return current


def _clean(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, Mapping):
        return node
    resolved = _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in resolved.items():
        if key in _DROPPED:
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "properties":
            out[key] = {name: _clean(prop, defs) for name, prop in value.items()}
        elif key == "required":
            out[key] = sorted(value)
        elif key in {"items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"}:
            out[key] = _clean(value, defs)
        else:
            out[key] = value
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural CRD schema (``openAPIV3Schema``) of a top-level model.

    Args:
        model: a :class:`~kube_agent_sandbox.api.base.KubeObject` subclass.

    Returns:
        The schema, with wire (camelCase) property names.
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    cleaned: dict[str, Any] = _clean(raw, defs)
    return cleaned
