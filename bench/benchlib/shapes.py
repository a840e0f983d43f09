"""Objects the benchmarks create or feed to caches.

:func:`sandbox_manifest` is what the cluster benchmarks create. :func:`served_sandbox` and
:func:`served_pod` imitate what the API server returns for a Ready Sandbox and its Pod (with
``managedFields``, server defaults and status as a kwok node reports it), so the cache-memory
benchmark measures the informer store on realistic data without a cluster.
"""

from __future__ import annotations

import uuid
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash

IMAGE = "registry.k8s.io/pause:3.10"
_TIME = "2026-12-01T03:00:00Z"


def sandbox_manifest(name: str, *, operating_mode: str | None = None) -> dict[str, Any]:
    """A minimal but typical Sandbox: one container with a port and resource requests.

    Args:
        name: metadata.name.
        operating_mode: ``Running``/``Suspended``; left to the server default when None.

    Returns:
        The manifest (namespace is given by the create call).
    """
    spec: dict[str, Any] = {
        "podTemplate": {
            "metadata": {"labels": {"app": "bench-agent"}},
            "spec": {
                "containers": [
                    {
                        "name": "agent",
                        "image": IMAGE,
                        "ports": [{"containerPort": 8888, "name": "http"}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    }
                ],
            },
        }
    }
    if operating_mode is not None:
        spec["operatingMode"] = operating_mode
    return {
        "apiVersion": c.SANDBOX_API_VERSION,
        "kind": c.KIND_SANDBOX,
        "metadata": {"name": name, "labels": {"bench": "true"}},
        "spec": spec,
    }


def _fields(*paths: str) -> dict[str, Any]:
    """A FieldsV1 tree with the given ``f:a/f:b`` leaf paths."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path.split("/"):
            node = node.setdefault(part, {})
    return tree


def _managed(manager: str, operation: str, fields: dict[str, Any], sub: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": _TIME,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def _condition(type_: str, status: str, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _TIME,
        **extra,
    }


def served_sandbox(namespace: str, name: str, index: int) -> dict[str, Any]:
    """A Ready Sandbox as the API server serves it (status, managedFields, defaults).

    Args:
        namespace: Its namespace.
        name: Its name.
        index: A number that makes resourceVersion and pod IP differ per object.

    Returns:
        The object, as decoded JSON.
    """
    manifest = sandbox_manifest(name)
    manifest["spec"]["operatingMode"] = c.OPERATING_MODE_RUNNING
    manifest["spec"]["shutdownPolicy"] = "Retain"
    manifest["metadata"].update(
        {
            "namespace": namespace,
            "uid": str(uuid.UUID(int=index + 1)),
            "resourceVersion": str(100000 + 3 * index),
            "generation": 1,
            "creationTimestamp": _TIME,
            "annotations": {c.ANNOTATION_POD_NAME: name},
            "managedFields": [
                _managed(
                    "bench",
                    "Update",
                    _fields(
                        "f:metadata/f:labels/.",
                        "f:metadata/f:labels/f:bench",
                        "f:spec/.",
                        "f:spec/f:podTemplate/.",
                        "f:spec/f:podTemplate/f:metadata/.",
                        "f:spec/f:podTemplate/f:metadata/f:labels/f:app",
                        "f:spec/f:podTemplate/f:spec/.",
                        "f:spec/f:podTemplate/f:spec/f:containers",
                    ),
                ),
                _managed(
                    "sandbox-controller",
                    "Update",
                    _fields(
                        "f:metadata/f:annotations/.",
                        f"f:metadata/f:annotations/f:{c.ANNOTATION_POD_NAME}",
                    ),
                ),
                _managed(
                    "sandbox-controller",
                    "Update",
                    _fields(
                        "f:status/.",
                        "f:status/f:conditions/.",
                        'f:status/f:conditions/k:{"type":"Ready"}/.',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:lastTransitionTime',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:message',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:observedGeneration',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:reason',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:status',
                        'f:status/f:conditions/k:{"type":"Ready"}/f:type',
                        'f:status/f:conditions/k:{"type":"Suspended"}/.',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:lastTransitionTime',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:message',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:observedGeneration',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:reason',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:status',
                        'f:status/f:conditions/k:{"type":"Suspended"}/f:type',
                        "f:status/f:nodeName",
                        "f:status/f:podIPs",
                        "f:status/f:selector",
                    ),
                    "status",
                ),
            ],
        }
    )
    manifest["status"] = {
        "conditions": [
            _condition(
                "Suspended",
                "False",
                c.REASON_NOT_SUSPENDED,
                "Sandbox is not suspended",
                observedGeneration=1,
            ),
            _condition(
                "Ready",
                "True",
                c.REASON_DEPENDENCIES_READY,
                "Pod is Ready; Service Exists",
                observedGeneration=1,
            ),
        ],
        "selector": f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash(name)}",
        "podIPs": [_pod_ip(index)],
        "nodeName": f"kwok-node-{index % 20}",
    }
    return manifest


def _pod_ip(index: int) -> str:
    return f"10.244.{(index >> 8) & 255}.{index & 255}"


def served_pod(namespace: str, name: str, index: int, *, sandbox_uid: str) -> dict[str, Any]:
    """A Running Pod of a Sandbox as the API server serves it on a kwok node.

    Args:
        namespace: Its namespace.
        name: Its name (the Sandbox's).
        index: A number that makes UIDs, versions and IPs differ per object.
        sandbox_uid: UID of the owning Sandbox.

    Returns:
        The object, as decoded JSON.
    """
    node = f"kwok-node-{index % 20}"
    token_volume = f"kube-api-access-{name_hash(name)[:5]}"
    ip = _pod_ip(index)
    container_status = {
        "name": "agent",
        "state": {"running": {"startedAt": _TIME}},
        "lastState": {},
        "ready": True,
        "restartCount": 0,
        "image": IMAGE,
        "imageID": "",
        "started": True,
        "volumeMounts": [
            {
                "name": token_volume,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
                "recursiveReadOnly": "Disabled",
            }
        ],
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.UUID(int=(1 << 64) + index)),
            "resourceVersion": str(100001 + 3 * index),
            "creationTimestamp": _TIME,
            "labels": {"app": "bench-agent", c.LABEL_SANDBOX_NAME_HASH: name_hash(name)},
            "ownerReferences": [
                {
                    "apiVersion": c.SANDBOX_API_VERSION,
                    "kind": c.KIND_SANDBOX,
                    "name": name,
                    "uid": sandbox_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "sandbox-controller",
                    "Update",
                    _fields(
                        "f:metadata/f:labels/.",
                        "f:metadata/f:labels/f:app",
                        f"f:metadata/f:labels/f:{c.LABEL_SANDBOX_NAME_HASH}",
                        "f:metadata/f:ownerReferences/.",
                        f'f:metadata/f:ownerReferences/k:{{"uid":"{sandbox_uid}"}}',
                        'f:spec/f:containers/k:{"name":"agent"}/.',
                        'f:spec/f:containers/k:{"name":"agent"}/f:image',
                        'f:spec/f:containers/k:{"name":"agent"}/f:imagePullPolicy',
                        'f:spec/f:containers/k:{"name":"agent"}/f:name',
                        'f:spec/f:containers/k:{"name":"agent"}/f:ports/.',
                        'f:spec/f:containers/k:{"name":"agent"}/f:resources/.',
                        "f:spec/f:dnsPolicy",
                        "f:spec/f:enableServiceLinks",
                        "f:spec/f:restartPolicy",
                        "f:spec/f:schedulerName",
                        "f:spec/f:securityContext",
                        "f:spec/f:terminationGracePeriodSeconds",
                    ),
                ),
                _managed(
                    "kwok",
                    "Update",
                    _fields(
                        'f:status/f:conditions/k:{"type":"ContainersReady"}/.',
                        'f:status/f:conditions/k:{"type":"Initialized"}/.',
                        'f:status/f:conditions/k:{"type":"Ready"}/.',
                        "f:status/f:containerStatuses",
                        "f:status/f:hostIP",
                        "f:status/f:hostIPs",
                        "f:status/f:phase",
                        "f:status/f:podIP",
                        "f:status/f:podIPs/.",
                        f'f:status/f:podIPs/k:{{"ip":"{ip}"}}/.',
                        "f:status/f:startTime",
                    ),
                    "status",
                ),
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": token_volume,
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "expirationSeconds": 3607,
                                    "path": "token",
                                }
                            },
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [
                {
                    "name": "agent",
                    "image": IMAGE,
                    "ports": [{"name": "http", "containerPort": 8888, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "volumeMounts": [
                        {
                            "name": token_volume,
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                _condition("Initialized", "True", "", "", lastProbeTime=None),
                _condition("Ready", "True", "", "", lastProbeTime=None),
                _condition("ContainersReady", "True", "", "", lastProbeTime=None),
                _condition("PodScheduled", "True", "", "", lastProbeTime=None),
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": _TIME,
            "containerStatuses": [container_status],
            "qosClass": "Burstable",
        },
    }
