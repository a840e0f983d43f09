"""Request parsing and response bodies of the E2B control plane (camelCase JSON).

Parsing is strict where a wrong value would silently change behaviour (types of
``timeout``, ``metadata``, ``envVars``) and lenient about fields the gateway does not
implement (``mcp``, ``iam``, ``network`` apart from ``allowPublicTraffic``, ``allowOut``
and ``denyOut``...), which are accepted and ignored, as older
SDKs send some of them on every call. Response bodies follow the E2B OpenAPI models the
SDK parses (``Sandbox``, ``SandboxDetail``, ``ListedSandbox``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_EGRESS,
    ANNOTATION_METADATA,
    ANNOTATION_ON_TIMEOUT,
    ANNOTATION_TEMPLATE,
    METADATA_IDLE_TIMEOUT,
    RESERVED_METADATA_PREFIX,
)
from kube_agent_sandbox.gateway.config import MAX_SANDBOX_TIMEOUT_SECONDS
from kube_agent_sandbox.gateway.daemon_client import ENVD_VERSION
from kube_agent_sandbox.gateway.egress import EgressRules, InvalidEgressRules, parse_egress
from kube_agent_sandbox.gateway.index import SandboxRecord, condition
from kube_agent_sandbox.gateway.tokens import Tokens

_DNS_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IDEMPOTENCY_KEY: Final = re.compile(r"^[a-z0-9-]{1,255}$")
MIN_IDLE_TIMEOUT_SECONDS: Final = 60
MAX_METADATA_BYTES: Final = 64 * 1024
"""Metadata is one annotation; all of an object's annotations must fit in 256 KiB."""
ON_TIMEOUT_KILL: Final = "kill"
ON_TIMEOUT_PAUSE: Final = "pause"
STATE_RUNNING: Final = "running"
STATE_PAUSED: Final = "paused"


class BadRequest(ValueError):
    """A request body or parameter the gateway refuses (answered with 400)."""


@dataclass(frozen=True)
class CreateRequest:
    """A parsed ``NewSandbox``/``NewSandboxV2`` body.

    Attributes:
        template_id: the E2B template (a warm pool or template name).
        timeout: sandbox lifetime in seconds.
        auto_pause: on timeout pause instead of kill.
        auto_pause_memory: that pause keeps the memory too (``autoPauseMemory``, E2B's default
            true), where the gateway's ``--pause-keeps-memory`` allows.
        auto_resume: the gateway may resume it on traffic.
        metadata: user metadata, reserved keys removed.
        env_vars: environment for the daemon's processes (never stored on objects).
        idle_timeout: idle timeout in seconds from metadata ``idle_timeout``, or None.
        allow_public_traffic: ``network.allowPublicTraffic`` (user ports without a token).
        egress: ``network.allowOut``/``denyOut`` (and ``allowInternetAccess``), or None.
    """

    template_id: str
    timeout: int
    auto_pause: bool = False
    auto_pause_memory: bool = True
    auto_resume: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    idle_timeout: int | None = None
    allow_public_traffic: bool = True
    egress: EgressRules | None = None


def _public_traffic(network: Any) -> bool:
    """``network.allowPublicTraffic`` (absent or null: E2B's default, public)."""
    if network is None:
        return True
    if not isinstance(network, dict):
        raise BadRequest("network must be an object")
    value = network.get("allowPublicTraffic")
    if value is None:
        return True
    if not isinstance(value, bool):
        raise BadRequest("network.allowPublicTraffic must be a boolean")
    return value


def parse_timeout(value: Any, *, default: int, what: str = "timeout") -> int:
    """A timeout in whole seconds (absent -> ``default``).

    Raises:
        BadRequest: if it is not a non-negative integer within the maximum.
    """
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{what} must be an integer number of seconds")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise BadRequest(f"{what} must be an integer number of seconds")
    seconds = int(value)
    if not 0 <= seconds <= MAX_SANDBOX_TIMEOUT_SECONDS:
        raise BadRequest(f"{what} must be between 0 and {MAX_SANDBOX_TIMEOUT_SECONDS} seconds")
    return seconds


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise BadRequest(f"{what} must be an object of strings")
        out[key] = item
    return out


def parse_create(body: Any, *, default_timeout: int) -> CreateRequest:
    """Parse a create body (v1 or v2 spelling).

    Raises:
        BadRequest: on a malformed body.
    """
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    template = body.get("templateID")
    if not isinstance(template, str) or not template:
        raise BadRequest("templateID is required")
    template = template.lower()
    if _DNS_NAME.fullmatch(template) is None:
        raise BadRequest(f"templateID {template!r} is not a valid template name")
    timeout = parse_timeout(body.get("timeout"), default=default_timeout)
    auto_pause = body.get("autoPause", False)
    if not isinstance(auto_pause, bool):
        raise BadRequest("autoPause must be a boolean")
    auto_pause_memory = body.get("autoPauseMemory", True)
    if not isinstance(auto_pause_memory, bool):
        raise BadRequest("autoPauseMemory must be a boolean")
    auto_resume_obj = body.get("autoResume")
    auto_resume = False
    if auto_resume_obj is not None:
        if not isinstance(auto_resume_obj, dict) or not isinstance(
            auto_resume_obj.get("enabled", False), bool
        ):
            raise BadRequest("autoResume must be an object {enabled: boolean}")
        auto_resume = bool(auto_resume_obj.get("enabled", False))
    env_vars = _string_map(body.get("envVars"), "envVars")
    for name in env_vars:
        if _ENV_NAME.fullmatch(name) is None:
            raise BadRequest(f"envVars has an invalid variable name {name!r}")
    metadata, idle_timeout = split_metadata(_string_map(body.get("metadata"), "metadata"))
    allow_public_traffic = _public_traffic(body.get("network"))
    try:
        egress = parse_egress(
            body.get("network"), allow_internet_access=body.get("allowInternetAccess")
        )
    except InvalidEgressRules as exc:
        raise BadRequest(str(exc)) from exc
    if len(json.dumps(metadata)) > MAX_METADATA_BYTES:
        raise BadRequest(f"metadata must stay under {MAX_METADATA_BYTES} bytes of JSON")
    return CreateRequest(
        template_id=template,
        timeout=timeout,
        auto_pause=auto_pause,
        auto_pause_memory=auto_pause_memory,
        auto_resume=auto_resume,
        metadata=metadata,
        env_vars=env_vars,
        idle_timeout=idle_timeout,
        allow_public_traffic=allow_public_traffic,
        egress=egress,
    )


def split_metadata(metadata: Mapping[str, str]) -> tuple[dict[str, str], int | None]:
    """Remove vendor options from metadata; returns ``(stored metadata, idle timeout)``.

    ``idle_timeout`` (seconds; ``0`` = off) becomes the idle-timeout policy; keys under the
    project's prefix are reserved and dropped.

    Raises:
        BadRequest: if ``idle_timeout`` is not a whole number of seconds >= 60 (or 0).
    """
    stored: dict[str, str] = {}
    idle: int | None = None
    for key, value in metadata.items():
        if key.startswith(RESERVED_METADATA_PREFIX):
            continue
        if key == METADATA_IDLE_TIMEOUT:
            text = value.strip()
            if not text.isdigit():
                raise BadRequest("metadata idle_timeout must be a whole number of seconds")
            idle = int(text)
            if 0 < idle < MIN_IDLE_TIMEOUT_SECONDS:
                raise BadRequest(
                    f"metadata idle_timeout must be 0 or at least {MIN_IDLE_TIMEOUT_SECONDS}"
                )
            continue
        stored[key] = value
    return stored, idle


def go_duration(seconds: int) -> str:
    """Seconds as a Go duration string (``900`` -> ``15m``, ``61`` -> ``61s``)."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp as Kubernetes writes it (second precision, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def deadline(now: datetime, seconds: int) -> str:
    """``now + seconds`` as RFC 3339."""
    return rfc3339(now + timedelta(seconds=seconds))


def stored_metadata(record: SandboxRecord) -> dict[str, str]:
    """The metadata stored on the claim (``{}`` when absent or unreadable)."""
    raw = record.annotations.get(ANNOTATION_METADATA)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def stored_egress(record: SandboxRecord) -> EgressRules | None:
    """The outbound rules stored on the claim, or None (none, or unreadable).

    Raises:
        InvalidEgressRules: if the annotation is there but not valid rules.
    """
    return EgressRules.from_json(record.annotations.get(ANNOTATION_EGRESS))


def _readable_egress(record: SandboxRecord) -> EgressRules | None:
    try:
        return stored_egress(record)
    except InvalidEgressRules:
        return None


def template_id(record: SandboxRecord) -> str:
    """The E2B template the sandbox was created from."""
    return record.annotations.get(ANNOTATION_TEMPLATE) or str(
        (record.claim.get("spec") or {}).get("warmPoolRef", {}).get("name", "")
    )


def on_timeout(record: SandboxRecord) -> str:
    """``kill`` or ``pause``."""
    value = record.annotations.get(ANNOTATION_ON_TIMEOUT, ON_TIMEOUT_KILL)
    return ON_TIMEOUT_PAUSE if value == ON_TIMEOUT_PAUSE else ON_TIMEOUT_KILL


def state_of(record: SandboxRecord) -> str:
    """``paused`` iff the Sandbox is suspended, else ``running``."""
    return STATE_PAUSED if record.suspended else STATE_RUNNING


def started_at(record: SandboxRecord) -> datetime:
    """When the sandbox became Ready (the claim's Ready transition), else its creation."""
    ready = condition(record.claim, c.CONDITION_READY)
    if ready is not None and ready.get("status") == "True":
        moment = parse_time(ready.get("lastTransitionTime"))
        if moment is not None:
            return moment
    created = parse_time(record.claim["metadata"].get("creationTimestamp"))
    return created or datetime.now(UTC)


def end_at(record: SandboxRecord) -> datetime:
    """When the E2B timeout fires: the claim's shutdownTime, or the pause-at deadline."""
    lifecycle = (record.claim.get("spec") or {}).get("lifecycle") or {}
    moment = parse_time(lifecycle.get("shutdownTime"))
    if moment is None:
        moment = parse_time(record.annotations.get(c.ANNOTATION_PAUSE_AT))
    if moment is None and record.sandbox is not None:
        sb_annotations = record.sandbox["metadata"].get("annotations") or {}
        moment = parse_time(sb_annotations.get(c.ANNOTATION_PAUSE_AT))
    return moment or started_at(record)


def _quantity_cpu(text: str) -> float:
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


_MEM_UNITS: Final = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def _quantity_bytes(text: str) -> float:
    for unit, factor in _MEM_UNITS.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def resources(record: SandboxRecord) -> tuple[int, int]:
    """``(cpuCount, memoryMB)`` from the pod's (else the Sandbox's) container resources."""
    spec: dict[str, Any] = {}
    if record.pod is not None:
        spec = record.pod.get("spec") or {}
    elif record.sandbox is not None:
        spec = ((record.sandbox.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
    cpu = 0.0
    mem = 0.0
    for container in spec.get("containers") or ():
        res = container.get("resources") or {}
        amounts = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        try:
            cpu += _quantity_cpu(str(amounts.get("cpu", "0")))
            mem += _quantity_bytes(str(amounts.get("memory", "0")))
        except ValueError:
            continue
    return max(1, math.ceil(cpu)), max(0, int(mem // 2**20))


def sandbox_body(record: SandboxRecord, *, tokens: Tokens, domain: str | None) -> dict[str, Any]:
    """The ``Sandbox`` body of create and connect."""
    return {
        "templateID": template_id(record),
        "sandboxID": record.sandbox_id,
        "clientID": "",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": tokens.envd_access_token(record.claim_uid),
        "trafficAccessToken": tokens.traffic_access_token(record.claim_uid),
        "domain": domain,
    }


def listed_body(record: SandboxRecord) -> dict[str, Any]:
    """The ``ListedSandbox`` body of one list entry."""
    cpu, memory = resources(record)
    return {
        "templateID": template_id(record),
        "sandboxID": record.sandbox_id,
        "clientID": "",
        "startedAt": rfc3339(started_at(record)),
        "endAt": rfc3339(end_at(record)),
        "cpuCount": cpu,
        "memoryMB": memory,
        "diskSizeMB": 0,
        "state": state_of(record),
        "envdVersion": ENVD_VERSION,
        "metadata": stored_metadata(record),
    }


def detail_body(record: SandboxRecord, *, tokens: Tokens, domain: str | None) -> dict[str, Any]:
    """The ``SandboxDetail`` body of get."""
    body = listed_body(record)
    rules = _readable_egress(record)
    auto_resume = record.annotations.get(c.ANNOTATION_AUTO_RESUME) == "true"
    body.update(
        {
            "envdAccessToken": tokens.envd_access_token(record.claim_uid),
            "domain": domain,
            "allowInternetAccess": rules is None or rules.internet_access,
            "lifecycle": {"autoResume": auto_resume, "onTimeout": on_timeout(record)},
        }
    )
    if rules is not None:
        body["network"] = {"allowOut": list(rules.allow_out), "denyOut": list(rules.deny_out)}
    return body


def parse_metadata_filter(text: str) -> dict[str, str]:
    """The list endpoint's ``metadata`` filter: ``k=v&k2=v2`` with each part URL-quoted.

    Raises:
        BadRequest: if an entry has no ``=``.
    """
    from urllib.parse import unquote

    wanted: dict[str, str] = {}
    for part in filter(None, text.split("&")):
        key, sep, value = part.partition("=")
        if not sep:
            raise BadRequest(f"metadata filter entry {part!r} is not key=value")
        wanted[unquote(unquote(key.replace("+", " ")))] = unquote(unquote(value.replace("+", " ")))
    return wanted


def parse_states(text: str | None) -> set[str]:
    """The list endpoint's ``state`` filter (comma-separated; default: both).

    Raises:
        BadRequest: on an unknown state.
    """
    if not text:
        return {STATE_RUNNING, STATE_PAUSED}
    states = {s.strip() for s in text.split(",") if s.strip()}
    unknown = states - {STATE_RUNNING, STATE_PAUSED}
    if unknown:
        raise BadRequest(f"unknown state filter {sorted(unknown)}")
    return states
