"""Small accessors on raw JSON objects, shared by the cache, the controllers and the recorder.

Objects stay plain dicts on hot paths; these helpers keep the dict digging in one place.
Ownership (controller references) lives in :mod:`.ownership`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_agent_sandbox.controller.runtime.types import Obj, Request


def meta(obj: Obj) -> dict[str, Any]:
    """The object's ``metadata``, for reading and for in-place edits.

    An object without a ``metadata`` dict (a body being built) gets an empty one, so an edit
    through the returned dict lands in the object. Objects read from the API server or a cache
    always carry metadata: reading them never changes them.
    """
    m = obj.get("metadata")
    if isinstance(m, dict):
        return m
    created: dict[str, Any] = {}
    obj["metadata"] = created
    return created


def namespace_of(obj: Obj) -> str:
    """``metadata.namespace`` or ``""`` for cluster-scoped objects."""
    return str(meta(obj).get("namespace") or "")


def name_of(obj: Obj) -> str:
    """``metadata.name`` or ``""``."""
    return str(meta(obj).get("name") or "")


def uid_of(obj: Obj) -> str | None:
    """The object's UID, None when it has none (not yet created)."""
    uid = obj.get("metadata", {}).get("uid")
    return str(uid) if uid else None


def resource_version_of(obj: Obj) -> str | None:
    """The object's resourceVersion, None when it has none."""
    rv = obj.get("metadata", {}).get("resourceVersion")
    return str(rv) if rv else None


def is_terminating(obj: Obj) -> bool:
    """Whether the object has a deletionTimestamp."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def request_of(obj: Obj) -> Request:
    """The reconcile request naming ``obj``."""
    m = meta(obj)
    return Request(str(m.get("namespace") or ""), str(m.get("name") or ""))


def group_of(api_version: str) -> str:
    """The API group of an ``apiVersion`` (``""`` for the core group ``v1``)."""
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""


def labels_match(obj: Obj, selector: Mapping[str, str]) -> bool:
    """True if every ``key: value`` of ``selector`` is a label of ``obj``."""
    if not selector:
        return True
    labels = meta(obj).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
