"""Validation and merge of a claim's ``additionalPodMetadata`` (docs/concepts/claims.md).

Upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go, validateAdditionalPodMetadata
and mergePodMetadata.

Claims may put labels and annotations on their Sandbox's pod, but must not opt the pod into
policy domains they do not own (labels: strict allow-list of domains) nor spoof system
metadata (annotations: block-list of Kubernetes and agent-sandbox domains). Errors carry
upstream's exact texts, including the Kubernetes qualified-name and label-value messages of
k8s.io/apimachinery v0.36, because they end up verbatim in the claim's Ready condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.conversion._common import go_quote

DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
"""Label domains allowed when the controller's allow-list file is absent or empty."""

RESTRICTED_ANNOTATION_DOMAINS: Final = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
"""Annotation prefixes (and their subdomains) claims may not set."""

EXEMPT_ANNOTATION_KEYS: Final = frozenset({c.ANNOTATION_SAFE_TO_EVICT})
"""Annotation keys allowed despite a restricted domain."""

# --- Kubernetes name validation (apimachinery pkg/api/validate/content) ---------------------

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT: Final = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT: Final = _DNS_LABEL_FMT + "(\\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_DNS_SUBDOMAIN_RE: Final = re.compile(_DNS_SUBDOMAIN_FMT)
_NAME_MAX: Final = 63
_SUBDOMAIN_MAX: Final = 253


class InvalidPodMetadataError(ValueError):
    """A claim's ``additionalPodMetadata`` is not acceptable (user error; not retried)."""


class MetadataOverrideError(ValueError):
    """A claim's label or annotation would change a value the template already sets."""


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def _byte_len(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Why ``value`` is not a lowercase RFC 1123 subdomain (empty list when it is)."""
    errs: list[str] = []
    if _byte_len(value) > _SUBDOMAIN_MAX:
        errs.append(_max_len_error(_SUBDOMAIN_MAX))
    if not _DNS_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a qualified name / label key (empty list when it is)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend(f"prefix part {msg}" for msg in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > _NAME_MAX:
        errs.append("name part " + _max_len_error(_NAME_MAX))
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid label value (empty list when it is)."""
    errs: list[str] = []
    if _byte_len(value) > _NAME_MAX:
        errs.append(_max_len_error(_NAME_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


# --- the claim rules --------------------------------------------------------------------------


def _in_domains(domain: str, domains: Sequence[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in domains)


def _check_key(key: str, value: str, *, is_label: bool, allowed: Sequence[str]) -> str | None:
    errs = qualified_name_errors(key)
    if errs:
        kind = "label" if is_label else "annotation"
        return f"invalid {kind} key: {go_quote(key)}: {'; '.join(errs)}"
    # Go's strings.EqualFold: Unicode case folding (the long s, U+017F, folds to "s").
    if is_label and key.casefold() == "app" and value.casefold() == "sandbox-router":
        return (
            f"restricted system label value: {go_quote(key)}={go_quote(value)} "
            "is not allowed in AdditionalPodMetadata"
        )
    prefix, sep, _ = key.partition("/")
    domain = prefix.lower() if sep else ""
    if is_label:
        if not sep:
            return (
                f"label {go_quote(key)} must have a domain prefix (e.g. "
                "'sandbox.users.io/my-label') to prevent opting into unintended policy domains"
            )
        if not _in_domains(domain, allowed):
            return f"label domain {go_quote(domain)} is not in the allowlist"
        errs = label_value_errors(value)
        if errs:
            return (
                f"invalid label value: {go_quote(value)} does not match allowed pattern: "
                + "; ".join(errs)
            )
        return None
    if _in_domains(domain, RESTRICTED_ANNOTATION_DOMAINS) and key not in EXEMPT_ANNOTATION_KEYS:
        return f"restricted system domain: {go_quote(key)} is not allowed in AdditionalPodMetadata"
    return None


def _string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def validate_additional_pod_metadata(
    metadata: Mapping[str, Any] | None, *, allowed_label_domains: Sequence[str]
) -> None:
    """Check a claim's ``additionalPodMetadata`` (``{labels, annotations}``) against 4.3.4.

    Labels: a qualified key with a domain prefix that equals or is a subdomain of an allowed
    domain, not ``app=sandbox-router`` (any case), and a valid label value. Annotations: a
    qualified key outside ``kubernetes.io``, ``k8s.io`` and ``agents.x-k8s.io`` (and their
    subdomains), except exactly ``cluster-autoscaler.kubernetes.io/safe-to-evict``. Keys are
    checked in sorted order, labels first, so the reported key is deterministic (upstream
    reports whichever its map iteration meets first).

    Args:
        metadata: The claim's ``spec.additionalPodMetadata`` (None or empty: nothing to check).
        allowed_label_domains: Lowercased allowed label domains; empty means
            :data:`DEFAULT_ALLOWED_LABEL_DOMAINS`.

    Raises:
        InvalidPodMetadataError: ``failed to validate label "<k>": <why>`` or
            ``failed to validate annotation "<k>": <why>``.
    """
    if not metadata:
        return
    allowed = tuple(allowed_label_domains) or DEFAULT_ALLOWED_LABEL_DOMAINS
    for kind, is_label in (("label", True), ("annotation", False)):
        values = _string_map(metadata.get(kind + "s"))
        for key in sorted(values):
            why = _check_key(key, values[key], is_label=is_label, allowed=allowed)
            if why is not None:
                raise InvalidPodMetadataError(f"failed to validate {kind} {go_quote(key)}: {why}")


def merge_without_overrides(
    base: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``base`` pod metadata plus ``extra``'s labels and annotations, refusing changed values.

    Neither argument is modified. Keys of ``base`` other than ``labels`` and ``annotations``
    are kept as they are. A key already present with the same value is fine.

    Args:
        base: The template's (or Sandbox's) pod metadata, ``{labels, annotations, ...}``.
        extra: The claim's ``additionalPodMetadata``.

    Returns:
        A new metadata dict; ``labels`` / ``annotations`` are new dicts whenever present in
        either input.

    Raises:
        MetadataOverrideError: ``metadata override conflict: label "<k>" is defined in
            template with value "<t>", but claim requests "<c>"`` (or ``annotation``); labels
            are checked before annotations, keys in sorted order.
    """
    merged: dict[str, Any] = dict(base)
    extras = {kind: _string_map((extra or {}).get(kind)) for kind in ("labels", "annotations")}
    for kind, values in extras.items():
        current = base.get(kind) or {}
        for key in sorted(values):
            if key in current and current[key] != values[key]:
                raise MetadataOverrideError(
                    f"metadata override conflict: {kind[:-1]} {go_quote(key)} is defined in "
                    f"template with value {go_quote(str(current[key]))}, but claim requests "
                    f"{go_quote(values[key])}"
                )
    for kind, values in extras.items():
        current = base.get(kind)
        if current is None and not values:
            continue
        combined = dict(current or {})
        combined.update(values)
        merged[kind] = combined
    return merged
