"""RFC 7386 JSON merge patches computed as the difference between two objects.

Reconcilers write with merge patches computed against the copy they read (controller-runtime's
``client.MergeFrom``): only what they changed goes over the wire, so fields they do not know or
stripped from their cache survive. The in-memory fake API applies patches with the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_agent_sandbox.controller.runtime.types import Obj


def create_merge_patch(base: Mapping[str, Any], modified: Mapping[str, Any]) -> Obj:
    """Return the merge patch that turns ``base`` into ``modified``.

    Keys missing from ``modified`` become ``null``; nested objects are diffed recursively;
    lists and scalars are replaced whole when they differ (RFC 7386 has no list merging).

    Args:
        base: The object as last read.
        modified: The desired object.

    Returns:
        The patch; empty when the two are equal.
    """
    patch: Obj = {}
    for key in base:
        if key not in modified:
            patch[key] = None
    for key, new in modified.items():
        old = base.get(key, _MISSING)
        if isinstance(new, Mapping) and isinstance(old, Mapping):
            sub = create_merge_patch(old, new)
            if sub:
                patch[key] = sub
        elif old is _MISSING or old != new or type(old) is not type(new):
            patch[key] = _copy_json(new)
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch and return the result (inputs are not mutated).

    Args:
        target: The document to patch.
        patch: The merge patch.

    Returns:
        The patched document.
    """
    if not isinstance(patch, Mapping):
        return _copy_json(patch)
    result: Obj = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


class _Missing:
    __slots__ = ()


_MISSING: Any = _Missing()


def _copy_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value
