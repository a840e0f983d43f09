"""Read-your-writes for the Sandbox: which cached versions predate this controller's own write.

The Sandbox cache delivers the controller's writes some milliseconds after the API server
accepted them, and owned-Pod events often trigger the next pass before that. A pass computed
from such a stale Sandbox would send the same write again. :class:`OwnWrite` records the
versions around one write so a pass can tell that the cache has not caught up yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    Obj,
    meta,
    name_of,
    namespace_of,
    resource_version_of,
    uid_of,
)


def rv_number(rv: str | None) -> int | None:
    """A resourceVersion as the integer etcd gives it (None when it is not one).

    resourceVersions are opaque strings, but Kubernetes 1.33 made those of the built-in
    storage comparable as integers (KEP-5504); any other form is compared only for equality.
    """
    return int(rv) if rv is not None and rv.isdigit() else None


@dataclass(frozen=True, slots=True)
class OwnWrite:
    """One write to a Sandbox: its UID and the resourceVersions before and after the write."""

    uid: str | None
    read_rv: str | None
    """resourceVersion of the object the write was computed from."""
    written_rv: int | None
    """resourceVersion the API server gave the write (None: not an integer)."""

    @classmethod
    def of(cls, sandbox: Obj, stored: object) -> OwnWrite:
        """The write computed from ``sandbox`` whose answer was ``stored``."""
        written = resource_version_of(stored) if isinstance(stored, dict) else None
        return cls(uid_of(sandbox), resource_version_of(sandbox), rv_number(written))

    def predates(self, cached: Obj) -> bool:
        """Whether ``cached`` is a version from before this write (the cache lags)."""
        if uid_of(cached) != self.uid:
            return False
        rv = resource_version_of(cached)
        if rv == self.read_rv:
            return True
        cached_rv = rv_number(rv)
        return cached_rv is not None and self.written_rv is not None and cached_rv < self.written_rv


class PodNameWrites:
    """The ``agents.x-k8s.io/pod-name`` annotation this controller last wrote, per Sandbox.

    A pass that starts from a cached Sandbox predating that write sees the annotation as
    written, so it does not patch it again (owned-Pod events usually arrive before the Sandbox
    event that shows the patch).
    """

    def __init__(self) -> None:
        self._written: dict[tuple[str, str], tuple[OwnWrite, str | None]] = {}

    def record(self, sandbox: Obj, stored: object, value: str | None) -> None:
        """Remember that ``value`` (None: removed) was written, answered by ``stored``."""
        key = (namespace_of(sandbox), name_of(sandbox))
        self._written[key] = (OwnWrite.of(sandbox, stored), value)

    def forget(self, key: tuple[str, str]) -> None:
        """Drop the memo of a Sandbox (deleted, or terminating)."""
        self._written.pop(key, None)

    def overlay(self, key: tuple[str, str], cached: Obj, sandbox: Obj) -> None:
        """Show the last written value on ``sandbox`` if ``cached`` predates that write."""
        found = self._written.pop(key, None)
        if found is None or not found[0].predates(cached):
            return
        self._written[key] = found
        value = found[1]
        annotations = dict(meta(sandbox).get("annotations") or {})
        if value is None:
            annotations.pop(c.ANNOTATION_POD_NAME, None)
        else:
            annotations[c.ANNOTATION_POD_NAME] = value
        meta(sandbox)["annotations"] = annotations
