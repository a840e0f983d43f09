"""Request building: the objects the SDK sends, computed without any I/O.

A Sandbox comes from a pydantic model, a dict or a YAML manifest; a SandboxClaim from a warm
pool name plus options. Both carry the wire contract of upstream's SDK: the
``agents.x-k8s.io/created-by: python-client`` label and, on claims, the
``agents.x-k8s.io/client-first-requested-at`` annotation (unless the caller set it).
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from kube_agent_sandbox.sdk.constants import (
    CLIENT_REQUEST_TIME_ANNOTATION,
    CREATED_BY_LABEL,
    CREATED_BY_VALUE,
    SANDBOX_CLAIMS,
    SANDBOXES,
)

if TYPE_CHECKING:
    from kube_agent_sandbox.api import Sandbox

Obj = dict[str, Any]
SandboxSource: TypeAlias = "Sandbox | Mapping[str, Any] | str | Path"

_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SHUTDOWN_POLICIES = frozenset({"Delete", "DeleteForeground", "Retain"})


def utcnow() -> datetime.datetime:
    """The current UTC time (a function so tests can pin it)."""
    return datetime.datetime.now(datetime.UTC)


def format_shutdown_time(when: datetime.datetime) -> str:
    """RFC 3339 in UTC with second precision, as upstream writes ``shutdownTime``."""
    if when.tzinfo is None:
        raise ValueError("shutdown time must be timezone-aware")
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def shutdown_after(seconds: int, *, now: datetime.datetime | None = None) -> str:
    """``shutdownTime`` ``seconds`` from ``now``.

    Raises:
        ValueError: unless ``seconds`` is a positive ``int`` (bools and floats are refused).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise ValueError(f"shutdown_after_seconds must be a positive int, got {seconds!r}")
    return format_shutdown_time((now or utcnow()) + datetime.timedelta(seconds=seconds))


def validate_name(name: str, *, what: str = "name") -> str:
    """Check a Kubernetes object name (DNS subdomain, at most 253 characters).

    Raises:
        ValueError: naming ``what`` and the rule broken.
    """
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN_RE.match(name):
        raise ValueError(
            f"invalid {what} {name!r}: must be a lowercase DNS subdomain "
            "(a-z, 0-9, '-', '.'; at most 253 characters)"
        )
    return name


def validate_namespace(namespace: str) -> str:
    """Check a namespace name (DNS label, at most 63 characters).

    Raises:
        ValueError: when it is not one.
    """
    if not namespace or len(namespace) > 63 or not _DNS_LABEL_RE.match(namespace):
        raise ValueError(f"invalid namespace {namespace!r}: must be a lowercase DNS label")
    return namespace


def validate_labels(labels: Mapping[str, str], *, what: str = "label") -> dict[str, str]:
    """Check label keys and values by Kubernetes' rules (upstream checks them client-side).

    Raises:
        ValueError: naming the first bad key or value.
    """
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"{what} keys and values must be strings: {key!r}={value!r}")
        prefix, sep, name = key.rpartition("/")
        if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
            raise ValueError(f"invalid {what} key {key!r}: bad prefix")
        if not name or len(name) > 63 or not _NAME_RE.match(name):
            raise ValueError(f"invalid {what} key {key!r}")
        if value and (len(value) > 63 or not _NAME_RE.match(value)):
            raise ValueError(f"invalid {what} value {value!r} for key {key!r}")
    return dict(labels)


def _load_manifest(text: str) -> Obj:
    import yaml  # only for manifests: a client that never parses one does not pay for it

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ValueError(f"not a YAML manifest: {err}") from err
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(f"expected exactly one object in the manifest, found {len(docs)}")
    return docs[0]


def sandbox_body(
    source: SandboxSource,
    *,
    name: str | None = None,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    shutdown_after_seconds: int | None = None,
    now: datetime.datetime | None = None,
) -> Obj:
    """The Sandbox to create, validated against the API model.

    Args:
        source: a :class:`~kube_agent_sandbox.api.Sandbox`, a dict, YAML text or a path to a
            YAML file holding one Sandbox.
        name: overrides ``metadata.name``. Without any name, ``generateName: sandbox-``.
        namespace: overrides ``metadata.namespace``.
        labels: added to ``metadata.labels``.
        shutdown_after_seconds: sets ``spec.shutdownTime`` that far ahead (policy kept).
        now: the current time (tests).

    Returns:
        A JSON-ready dict carrying ``agents.x-k8s.io/created-by: python-client``.

    Raises:
        ValueError: when the source is not a valid Sandbox (messages name the field).
    """
    from kube_agent_sandbox.api import Sandbox

    if isinstance(source, Sandbox):
        obj = source.to_dict()
    elif isinstance(source, Path):
        obj = _load_manifest(source.read_text(encoding="utf-8"))
    elif isinstance(source, str):
        obj = _load_manifest(source)
    elif isinstance(source, Mapping):
        obj = dict(source)
    else:
        raise TypeError(f"cannot build a Sandbox from {type(source).__name__}")
    obj.setdefault("apiVersion", SANDBOXES.api_version)
    obj.setdefault("kind", SANDBOXES.kind)
    if obj["apiVersion"] != SANDBOXES.api_version or obj["kind"] != SANDBOXES.kind:
        raise ValueError(
            f"expected {SANDBOXES.api_version} {SANDBOXES.kind}, "
            f"got {obj['apiVersion']} {obj['kind']}"
        )
    meta = dict(obj.get("metadata") or {})
    if name is not None:
        meta["name"] = validate_name(name, what="sandbox name")
        meta.pop("generateName", None)
    elif not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = "sandbox-"
    if namespace is not None:
        meta["namespace"] = validate_namespace(namespace)
    merged = dict(meta.get("labels") or {})
    merged.update(validate_labels(labels or {}))
    merged.setdefault(CREATED_BY_LABEL, CREATED_BY_VALUE)
    meta["labels"] = merged
    obj["metadata"] = meta
    if shutdown_after_seconds is not None:
        spec = dict(obj.get("spec") or {})
        spec["shutdownTime"] = shutdown_after(shutdown_after_seconds, now=now)
        obj["spec"] = spec
    obj.pop("status", None)
    _validate("Sandbox", obj)
    return obj


def _validate(kind: str, obj: Obj) -> None:
    """Check ``obj`` against the API model of ``kind`` (``Sandbox`` or ``SandboxClaim``).

    pydantic and the models are imported here, on the first object built, not with the SDK.

    Raises:
        ValueError: naming every invalid field.
    """
    from pydantic import ValidationError

    from kube_agent_sandbox import api

    try:
        getattr(api, kind).model_validate(obj)
    except ValidationError as err:
        raise ValueError(f"invalid {kind}: " + "; ".join(api.validation_messages(err))) from err


def claim_name() -> str:
    """``sandbox-claim-<8 hex>``, the name upstream's SDK gives claims."""
    return f"sandbox-claim-{uuid.uuid4().hex[:8]}"


def claim_body(
    warm_pool: str,
    *,
    name: str | None = None,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    env: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
    pod_labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    shutdown_after_seconds: int | None = None,
    shutdown_time: datetime.datetime | None = None,
    shutdown_policy: str | None = None,
    ttl_seconds_after_finished: int | None = None,
    volume_claim_templates: Sequence[Mapping[str, Any]] | None = None,
    now: datetime.datetime | None = None,
) -> Obj:
    """The SandboxClaim to create (docs/guides/sdk.md, "Claim a Sandbox from a warm pool").

    Args:
        warm_pool: the SandboxWarmPool (``spec.warmPoolRef.name``), which names the template.
        name: claim name; ``sandbox-claim-<8 hex>`` by default.
        namespace: ``metadata.namespace``.
        labels: claim labels (``agents.x-k8s.io/created-by`` is always ``python-client``).
        annotations: claim annotations; ``client-first-requested-at`` is added unless given.
        env: ``{name: value}`` or a list of ``{name, value, containerName?}`` (forces a cold
            start).
        pod_labels: ``spec.additionalPodMetadata.labels``.
        pod_annotations: ``spec.additionalPodMetadata.annotations``.
        shutdown_after_seconds: ``lifecycle.shutdownTime`` that far ahead (policy ``Delete``
            unless ``shutdown_policy`` says otherwise), as upstream does.
        shutdown_time: an absolute ``lifecycle.shutdownTime`` instead.
        shutdown_policy: ``Delete``, ``DeleteForeground`` or ``Retain``.
        ttl_seconds_after_finished: ``lifecycle.ttlSecondsAfterFinished``.
        volume_claim_templates: ``spec.volumeClaimTemplates`` (forces a cold start).
        now: the current time (tests).

    Returns:
        A JSON-ready dict, validated against the API model.

    Raises:
        ValueError: on an empty pool, bad labels, conflicting lifecycle options or a claim
            the API model refuses.
    """
    if not warm_pool:
        raise ValueError("warm_pool must be a non-empty SandboxWarmPool name")
    validate_name(warm_pool, what="warm pool name")
    now = now or utcnow()
    meta: Obj = {"name": validate_name(name or claim_name(), what="claim name")}
    if namespace is not None:
        meta["namespace"] = validate_namespace(namespace)
    claim_labels = validate_labels(labels or {})
    claim_labels[CREATED_BY_LABEL] = CREATED_BY_VALUE
    meta["labels"] = claim_labels
    claim_annotations = dict(annotations or {})
    claim_annotations.setdefault(CLIENT_REQUEST_TIME_ANNOTATION, now.isoformat())
    meta["annotations"] = claim_annotations
    spec: Obj = {"warmPoolRef": {"name": warm_pool}}
    lifecycle: Obj = {}
    if shutdown_after_seconds is not None and shutdown_time is not None:
        raise ValueError("give shutdown_after_seconds or shutdown_time, not both")
    if shutdown_after_seconds is not None:
        lifecycle["shutdownTime"] = shutdown_after(shutdown_after_seconds, now=now)
        lifecycle["shutdownPolicy"] = "Delete"
    if shutdown_time is not None:
        lifecycle["shutdownTime"] = format_shutdown_time(shutdown_time)
    if shutdown_policy is not None:
        if shutdown_policy not in SHUTDOWN_POLICIES:
            raise ValueError(
                f"shutdown_policy must be one of {sorted(SHUTDOWN_POLICIES)}, "
                f"got {shutdown_policy!r}"
            )
        lifecycle["shutdownPolicy"] = shutdown_policy
    if ttl_seconds_after_finished is not None:
        if isinstance(ttl_seconds_after_finished, bool) or ttl_seconds_after_finished < 0:
            raise ValueError("ttl_seconds_after_finished must be a non-negative int")
        lifecycle["ttlSecondsAfterFinished"] = ttl_seconds_after_finished
    if lifecycle:
        spec["lifecycle"] = lifecycle
    pod_meta: Obj = {}
    if pod_labels:
        pod_meta["labels"] = validate_labels(pod_labels, what="pod label")
    if pod_annotations:
        pod_meta["annotations"] = dict(pod_annotations)
    if pod_meta:
        spec["additionalPodMetadata"] = pod_meta
    if env:
        if isinstance(env, Mapping):
            spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
        else:
            spec["env"] = [dict(e) for e in env]
    if volume_claim_templates:
        spec["volumeClaimTemplates"] = [dict(t) for t in volume_claim_templates]
    obj: Obj = {
        "apiVersion": SANDBOX_CLAIMS.api_version,
        "kind": SANDBOX_CLAIMS.kind,
        "metadata": meta,
        "spec": spec,
    }
    _validate("SandboxClaim", obj)
    return obj


def operating_mode_patch(mode: str) -> Obj:
    """Merge patch setting ``spec.operatingMode`` (``Running`` or ``Suspended``)."""
    if mode not in ("Running", "Suspended"):
        raise ValueError(f"operating mode must be Running or Suspended, got {mode!r}")
    return {"spec": {"operatingMode": mode}}


def shutdown_patch(shutdown_time: datetime.datetime | None, *, policy: str | None = None) -> Obj:
    """Merge patch setting (or, with ``None``, removing) ``spec.shutdownTime``.

    Raises:
        ValueError: on a naive time or a policy other than ``Delete``/``Retain``.
    """
    spec: Obj = {
        "shutdownTime": None if shutdown_time is None else format_shutdown_time(shutdown_time)
    }
    if policy is not None:
        if policy not in ("Delete", "Retain"):
            raise ValueError(f"Sandbox shutdownPolicy must be Delete or Retain, got {policy!r}")
        spec["shutdownPolicy"] = policy
    return {"spec": spec}


def extended_shutdown_time(
    obj: Obj, seconds: float, *, now: datetime.datetime | None = None
) -> datetime.datetime:
    """The new ``shutdownTime`` when extending ``obj``'s by ``seconds``.

    An object without a shutdown time (or one already past) is extended from now.
    """
    if seconds <= 0:
        raise ValueError(f"extension must be positive, got {seconds!r}")
    now = now or utcnow()
    current = (obj.get("spec") or {}).get("shutdownTime")
    base = now
    if isinstance(current, str) and current:
        parsed = datetime.datetime.fromisoformat(current.replace("Z", "+00:00"))
        base = max(parsed, now)
    return base + datetime.timedelta(seconds=seconds)
