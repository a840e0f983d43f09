"""REST resource descriptors of every kind the Sandbox controller reads or writes.

Kept in one place so the reconciler, the watch setup and the RBAC rules all name the same
group/version/plural and cannot drift apart. Labels, annotations and spec enum values live in
:mod:`kube_agent_sandbox.api.constants`, shared with the extensions and the SDK.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Resource

SANDBOXES: Final = Resource(
    group=c.GROUP, version=c.V1BETA1, plural="sandboxes", kind=c.KIND_SANDBOX
)
PODS: Final = Resource(group="", version="v1", plural="pods", kind="Pod")
SERVICES: Final = Resource(group="", version="v1", plural="services", kind="Service")
PVCS: Final = Resource(
    group="", version="v1", plural="persistentvolumeclaims", kind="PersistentVolumeClaim"
)
