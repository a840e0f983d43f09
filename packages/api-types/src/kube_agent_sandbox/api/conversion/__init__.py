"""Conversion between the v1alpha1 and v1beta1 versions of the Agent Sandbox kinds.

Pure functions on decoded JSON, shared by the controller's conversion webhook and by tests.
v1beta1 is the hub; each kind's module documents its rules (and names
upstream v0.5.6's ``*_conversion.go`` file it follows). Working on
dicts rather than models keeps every field the converter does not know about, as the API
server's own storage round trip would.

Example:
    >>> from kube_agent_sandbox.api.conversion import convert
    >>> beta = convert(alpha_sandbox, "agents.x-k8s.io/v1beta1")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from kube_agent_sandbox.api.constants import (
    EXTENSIONS_GROUP,
    GROUP,
    KIND_SANDBOX,
    KIND_SANDBOX_CLAIM,
    KIND_SANDBOX_SNAPSHOT,
    KIND_SANDBOX_TEMPLATE,
    KIND_SANDBOX_WARM_POOL,
    V1ALPHA1,
    V1BETA1,
)
from kube_agent_sandbox.api.conversion import (
    sandbox,
    sandboxclaim,
    sandboxsnapshot,
    sandboxtemplate,
    sandboxwarmpool,
)
from kube_agent_sandbox.api.conversion._common import ConversionError, Obj, deep_copy

__all__ = ["HUB_VERSION", "SPOKE_VERSION", "SUPPORTED_KINDS", "ConversionError", "convert"]

HUB_VERSION: Final = V1BETA1
SPOKE_VERSION: Final = V1ALPHA1

_Converter = tuple[Callable[[Obj], Obj], Callable[[Obj], Obj]]

_CONVERTERS: Final[dict[tuple[str, str], _Converter]] = {
    (GROUP, KIND_SANDBOX): (sandbox.to_hub, sandbox.from_hub),
    (EXTENSIONS_GROUP, KIND_SANDBOX_TEMPLATE): (sandboxtemplate.to_hub, sandboxtemplate.from_hub),
    (EXTENSIONS_GROUP, KIND_SANDBOX_WARM_POOL): (sandboxwarmpool.to_hub, sandboxwarmpool.from_hub),
    (EXTENSIONS_GROUP, KIND_SANDBOX_CLAIM): (sandboxclaim.to_hub, sandboxclaim.from_hub),
    (EXTENSIONS_GROUP, KIND_SANDBOX_SNAPSHOT): (sandboxsnapshot.to_hub, sandboxsnapshot.from_hub),
}

SUPPORTED_KINDS: Final = frozenset(_CONVERTERS)
"""The (group, kind) pairs :func:`convert` handles."""

_VERSIONS: Final = (V1ALPHA1, V1BETA1)


def _split_api_version(api_version: object, what: str) -> tuple[str, str]:
    if not isinstance(api_version, str) or not api_version:
        raise ConversionError(f"{what}: expected a non-empty string, got {api_version!r}")
    group, sep, version = api_version.rpartition("/")
    if not sep or not group:
        raise ConversionError(f"{what} {api_version!r} has no API group")
    if version not in _VERSIONS:
        raise ConversionError(
            f"{what} {api_version!r}: unsupported version {version!r}"
            f" (supported: {', '.join(_VERSIONS)})"
        )
    return group, version


def convert(obj: Mapping[str, Any], to_api_version: str) -> dict[str, Any]:
    """Convert one object to ``to_api_version`` (same group), leaving ``obj`` untouched.

    Args:
        obj: A Sandbox, SandboxTemplate, SandboxWarmPool or SandboxClaim as decoded JSON, in
            ``v1alpha1`` or ``v1beta1``.
        to_api_version: The wanted ``group/version``, e.g. ``extensions.agents.x-k8s.io/v1beta1``.

    Returns:
        A new object in the wanted version (a copy when it is already in that version).

    Raises:
        ConversionError: unknown kind, group or version, a group change, or a field with the
            wrong JSON type; for a SandboxTemplate also an invalid policy annotation value.
    """
    if not isinstance(obj, Mapping):
        raise ConversionError(f"object: expected a JSON object, got {type(obj).__name__}")
    from_group, from_version = _split_api_version(obj.get("apiVersion"), "apiVersion")
    to_group, to_version = _split_api_version(to_api_version, "desired apiVersion")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ConversionError(f"kind: expected a non-empty string, got {kind!r}")
    converters = _CONVERTERS.get((from_group, kind))
    if converters is None:
        raise ConversionError(f"no conversion for kind {kind!r} in group {from_group!r}")
    if to_group != from_group:
        raise ConversionError(
            f"cannot convert {kind} from group {from_group!r} to group {to_group!r}"
        )

    out: Obj = deep_copy(dict(obj))
    if from_version != to_version:
        to_hub, from_hub = converters
        out = to_hub(out) if to_version == HUB_VERSION else from_hub(out)
    out["apiVersion"] = to_api_version
    return out
