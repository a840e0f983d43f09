"""Small accessors on raw JSON objects, shared by the cache, the controller and the recorder.

Objects stay plain dicts on hot paths; these helpers keep the dict digging in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_agent_sandbox.controller.runtime.types import Obj, Request


def meta(obj: Obj) -> dict[str, Any]:
    """The object's ``metadata`` (an empty dict if absent)."""
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def namespace_of(obj: Obj) -> str:
    """``metadata.namespace`` or ``""`` for cluster-scoped objects."""
    return str(meta(obj).get("namespace") or "")


def name_of(obj: Obj) -> str:
    """``metadata.name`` or ``""``."""
    return str(meta(obj).get("name") or "")


def request_of(obj: Obj) -> Request:
    """The reconcile request naming ``obj``."""
    m = meta(obj)
    return Request(str(m.get("namespace") or ""), str(m.get("name") or ""))


def group_of(api_version: str) -> str:
    """The API group of an ``apiVersion`` (``""`` for the core group ``v1``)."""
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    refs = meta(obj).get("ownerReferences")
    if not refs:
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def labels_match(obj: Obj, selector: Mapping[str, str]) -> bool:
    """True if every ``key: value`` of ``selector`` is a label of ``obj``."""
    if not selector:
        return True
    labels = meta(obj).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
