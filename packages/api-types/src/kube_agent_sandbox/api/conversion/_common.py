"""Shared helpers of the v1alpha1 <-> v1beta1 converters: typed field access and state encoding.

The converters work on decoded JSON (what the apiserver sends to the conversion webhook), so
every field they read is checked here and a wrong type becomes a :class:`ConversionError` with
the field's path instead of a ``TypeError`` deep inside a converter.
"""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


class ConversionError(ValueError):
    """An object cannot be converted. The message is what the API server reports to its client."""


def deep_copy(value: Any) -> Any:
    """Copy decoded JSON (dicts, lists, scalars) much faster than :func:`copy.deepcopy`."""
    if isinstance(value, dict):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def opt_dict(parent: Obj, key: str, path: str) -> Obj | None:
    """Return ``parent[key]`` if it is an object, None if absent or null; raise otherwise."""
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConversionError(f"{path}: expected object, got {_json_type(value)}")
    return value


def ensure_dict(parent: Obj, key: str, path: str) -> Obj:
    """Return ``parent[key]`` as an object, creating an empty one when absent or null."""
    value = opt_dict(parent, key, path)
    if value is None:
        value = {}
        parent[key] = value
    return value


def opt_str(parent: Obj | None, key: str, path: str) -> str | None:
    """Return ``parent[key]`` if it is a string, None if absent or null; raise otherwise."""
    if parent is None:
        return None
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConversionError(f"{path}: expected string, got {_json_type(value)}")
    return value


def opt_int32(parent: Obj | None, key: str, path: str) -> int | None:
    """Return ``parent[key]`` if it is an int32, None if absent or null; raise otherwise."""
    if parent is None:
        return None
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionError(f"{path}: expected integer, got {_json_type(value)}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ConversionError(f"{path}: value {value} does not fit in int32")
    return value


def annotations_of(obj: Obj, path: str = "metadata.annotations") -> dict[str, str] | None:
    """Return the object's annotations (checked to be a string map), None when there are none."""
    metadata = opt_dict(obj, "metadata", "metadata")
    if metadata is None:
        return None
    annotations = opt_dict(metadata, "annotations", path)
    if annotations is None:
        return None
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise ConversionError(f"{path}[{key}]: expected string, got {_json_type(value)}")
    return annotations


def pop_annotation(obj: Obj, key: str) -> str | None:
    """Remove an annotation and return its value; drop the map when it becomes empty.

    Go omits an empty annotations map (``omitempty``), so an object that only carried the
    removed annotation comes out without ``metadata.annotations``, as upstream's does.
    """
    annotations = annotations_of(obj)
    if annotations is None or key not in annotations:
        return None
    value = annotations.pop(key)
    if not annotations:
        del obj["metadata"]["annotations"]
    return value


def set_annotation(obj: Obj, key: str, value: str) -> None:
    """Set an annotation, creating ``metadata`` and ``metadata.annotations`` when needed."""
    metadata = ensure_dict(obj, "metadata", "metadata")
    annotations = ensure_dict(metadata, "annotations", "metadata.annotations")
    annotations[key] = value


def encode_state(obj: Obj, annotation: str) -> str:
    """Serialize a v1alpha1 object for its state annotation, without that annotation.

    Upstream stores Go's ``json.Marshal`` of the typed object. This uses compact separators
    and UTF-8 (no HTML escaping), so the bytes may differ from Go's while the JSON value is the
    same; the decode side (:func:`decode_state`) reads either form.
    """
    state = obj
    annotations = annotations_of(obj)
    if annotations is not None and annotation in annotations:
        # Shallow copies down to the annotations: serializing never mutates, so the rest of
        # the object is shared rather than deep-copied.
        kept = {k: v for k, v in annotations.items() if k != annotation}
        metadata = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
        if kept:
            metadata["annotations"] = kept
        state = {**obj, "metadata": metadata}
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False)


def decode_state(text: str, kind: str) -> Obj:
    """Parse a state annotation written by this module or by upstream's Go code."""
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise ConversionError(f"failed to unmarshal v1alpha1 {kind} state: {exc}") from exc
    if not isinstance(state, dict):
        raise ConversionError(
            f"failed to unmarshal v1alpha1 {kind} state: expected object, got {_json_type(state)}"
        )
    return state


def go_quote(value: str) -> str:
    """Quote a string like Go's ``%q`` verb (``strconv.Quote``), for upstream's error texts."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}
