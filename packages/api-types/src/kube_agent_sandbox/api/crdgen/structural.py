"""Refuse a schema the apiserver would not accept as structural.

Kubernetes requires CRD schemas to be *structural* (every node typed, no references, logic
keywords only for value validation, ``properties`` and ``additionalProperties`` not mixed) or
it disables pruning and defaulting. The generator checks its output with these rules so a model
change that produces such a schema fails loudly at generation time, not at install time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_LOGIC_KEYS: Final = ("anyOf", "allOf", "oneOf", "not")
_FORBIDDEN_IN_LOGIC: Final = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "items",
        "default",
        "nullable",
        "description",
        "title",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-int-or-string",
    }
)
_INT_OR_STRING_VARIANTS: Final = [{"type": "integer"}, {"type": "string"}]


class NonStructuralSchemaError(ValueError):
    """The generated schema is not structural; ``problems`` says where and why."""

    def __init__(self, problems: list[str]) -> None:
        """Keep the problems and summarize them in the message."""
        super().__init__("non-structural schema:\n  " + "\n  ".join(problems))
        self.problems = problems


def _check_logic(node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    for key in _LOGIC_KEYS:
        branches = node.get(key)
        if branches is None:
            continue
        if node.get("x-kubernetes-int-or-string") and key == "anyOf":
            if branches != _INT_OR_STRING_VARIANTS:
                problems.append(f"{path}: int-or-string anyOf must be [integer, string]")
            continue
        for branch in branches if isinstance(branches, list) else [branches]:
            bad = sorted(_FORBIDDEN_IN_LOGIC & set(branch))
            if bad:
                problems.append(f"{path}.{key}: only value validations allowed, found {bad}")


def _check(node: Any, path: str, problems: list[str]) -> None:
    if not isinstance(node, Mapping):
        problems.append(f"{path}: schema must be an object")
        return
    if "$ref" in node:
        problems.append(f"{path}: $ref is not allowed")
    typed = bool(node.get("type"))
    if not typed and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        problems.append(f"{path}: type is missing")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties: false is not allowed")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: array without items")
    _check_logic(node, path, problems)
    for name, child in node.get("properties", {}).items():
        _check(child, f"{path}.{name}", problems)
    if isinstance(node.get("items"), Mapping):
        _check(node["items"], f"{path}[]", problems)
    if isinstance(node.get("additionalProperties"), Mapping):
        _check(node["additionalProperties"], f"{path}{{}}", problems)
    for key in node.get("required", []):
        if key not in node.get("properties", {}):
            problems.append(f"{path}: required property {key} is not declared")


def check_structural(schema: Mapping[str, Any]) -> None:
    """Raise unless ``schema`` (an ``openAPIV3Schema``) is structural.

    Raises:
        NonStructuralSchemaError: with every problem found.
    """
    problems: list[str] = []
    _check(schema, "", problems)
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is not None and set(metadata) != {"type"}:
        problems.append(".metadata: only `type: object` is allowed at the root")
    if problems:
        raise NonStructuralSchemaError(problems)
