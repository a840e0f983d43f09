"""RFC 6902 JSON patches, the subset the in-memory API server applies (add, replace, remove, test).

Kept apart from :mod:`~kube_agent_sandbox.controller.runtime.fake` because applying a patch
needs nothing of the fake server's state: it is a pure function of the document and the ops.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kube_agent_sandbox.controller.runtime.types import ApiError, Obj


def apply_json_patch(doc: Obj, ops: Sequence[Obj]) -> Obj:
    """Return a copy of ``doc`` with the RFC 6902 operations ``ops`` applied.

    Supports add, replace, remove and test on objects and lists (``-`` appends).

    Raises:
        ApiError: 422 Invalid when a test fails, a path is missing or an op is unsupported.
    """
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"missing path {op['path']}")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", f"missing path {op['path']}")
        else:
            raise ApiError(422, "Invalid", f"unsupported op {kind!r}")
    return doc
