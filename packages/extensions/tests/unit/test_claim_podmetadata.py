"""additionalPodMetadata validation and the "no overrides" merge, with upstream's texts.

Upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go, validateAdditionalPodMetadata.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.extensions.claim.podmetadata import (
    DEFAULT_ALLOWED_LABEL_DOMAINS,
    InvalidPodMetadataError,
    MetadataOverrideError,
    merge_without_overrides,
    validate_additional_pod_metadata,
)

KEY_RE = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{KEY_RE}')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '({KEY_RE})?')"
)
LONG = "a" * 64


def test_default_domains() -> None:
    assert DEFAULT_ALLOWED_LABEL_DOMAINS == ("sandbox.users.io",)


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param(None, id="none"),
        pytest.param({}, id="empty"),
        pytest.param({"labels": {}, "annotations": {}}, id="empty-maps"),
        pytest.param({"labels": {"sandbox.users.io/team": "a"}}, id="allowed-domain"),
        pytest.param({"labels": {"x.sandbox.users.io/team": "a"}}, id="subdomain"),
        pytest.param({"labels": {"sandbox.users.io/empty": ""}}, id="empty-value"),
        pytest.param({"labels": {"sandbox.users.io/v": "a" * 63}}, id="value-63"),
        pytest.param({"labels": {"sandbox.users.io/" + "n" * 63: "v"}}, id="name-63"),
        pytest.param({"annotations": {"plain": "anything goes \n"}}, id="unprefixed-annotation"),
        pytest.param({"annotations": {"example.com/x": "y"}}, id="foreign-annotation"),
        pytest.param(
            {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
            id="exempt-annotation",
        ),
        pytest.param({"annotations": {"notkubernetes.io/x": "y"}}, id="suffix-not-subdomain"),
        pytest.param({"labels": {"sandbox.users.io/app": "sandbox-router"}}, id="prefixed-app"),
    ],
)
def test_valid_metadata(metadata: dict[str, Any] | None) -> None:
    validate_additional_pod_metadata(metadata, allowed_label_domains=())


@pytest.mark.parametrize(
    ("metadata", "domains", "message"),
    [
        pytest.param(
            {"labels": {"team": "a"}},
            (),
            'failed to validate label "team": label "team" must have a domain prefix (e.g. '
            "'sandbox.users.io/my-label') to prevent opting into unintended policy domains",
            id="no-prefix",
        ),
        pytest.param(
            {"labels": {"example.com/team": "a"}},
            (),
            'failed to validate label "example.com/team": label domain "example.com" is not in '
            "the allowlist",
            id="domain-not-allowed",
        ),
        pytest.param(
            {"labels": {"users.io/team": "a"}},
            (),
            'failed to validate label "users.io/team": label domain "users.io" is not in the '
            "allowlist",
            id="parent-domain-not-allowed",
        ),
        pytest.param(
            {"labels": {"evilsandbox.users.io/team": "a"}},
            (),
            'failed to validate label "evilsandbox.users.io/team": label domain '
            '"evilsandbox.users.io" is not in the allowlist',
            id="suffix-without-dot",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/team": "a"}},
            ("corp.example",),
            'failed to validate label "sandbox.users.io/team": label domain "sandbox.users.io" '
            "is not in the allowlist",
            id="custom-list-replaces-default",
        ),
        pytest.param(
            {"labels": {"app": "sandbox-router"}},
            (),
            'failed to validate label "app": restricted system label value: '
            '"app"="sandbox-router" is not allowed in AdditionalPodMetadata',
            id="router-spoof",
        ),
        pytest.param(
            {"labels": {"App": "\u017fandbox-router"}},
            (),
            'failed to validate label "App": restricted system label value: '
            '"App"="\u017fandbox-router" is not allowed in AdditionalPodMetadata',
            id="router-spoof-unicode-fold",
        ),
        pytest.param(
            {"labels": {"APP": "Sandbox-Router"}},
            (),
            'failed to validate label "APP": restricted system label value: '
            '"APP"="Sandbox-Router" is not allowed in AdditionalPodMetadata',
            id="router-spoof-any-case",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/team": "bad value"}},
            (),
            'failed to validate label "sandbox.users.io/team": invalid label value: '
            f'"bad value" does not match allowed pattern: {VALUE_MSG}',
            id="bad-value",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/team": LONG}},
            (),
            'failed to validate label "sandbox.users.io/team": invalid label value: '
            f'"{LONG}" does not match allowed pattern: must be no more than 63 bytes',
            id="long-value",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/team": "-" + LONG}},
            (),
            'failed to validate label "sandbox.users.io/team": invalid label value: '
            f'"-{LONG}" does not match allowed pattern: must be no more than 63 bytes; '
            + VALUE_MSG,
            id="long-and-bad-value",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/-x": "a"}},
            (),
            'failed to validate label "sandbox.users.io/-x": invalid label key: '
            f'"sandbox.users.io/-x": name part {KEY_MSG}',
            id="bad-key-name",
        ),
        pytest.param(
            {"labels": {"a/b/c": "a"}},
            (),
            'failed to validate label "a/b/c": invalid label key: "a/b/c": a valid label key '
            f"{KEY_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            id="two-slashes",
        ),
        pytest.param(
            {"labels": {"/x": "a"}},
            (),
            'failed to validate label "/x": invalid label key: "/x": prefix part must be non-empty',
            id="empty-prefix",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/": "a"}},
            (),
            'failed to validate label "sandbox.users.io/": invalid label key: '
            f'"sandbox.users.io/": name part must be non-empty; name part {KEY_MSG}',
            id="empty-name",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/" + LONG: "a"}},
            (),
            f'failed to validate label "sandbox.users.io/{LONG}": invalid label key: '
            f'"sandbox.users.io/{LONG}": name part must be no more than 63 bytes',
            id="long-name",
        ),
        pytest.param(
            {"labels": {"Sandbox.users.io/x": "a"}},
            (),
            'failed to validate label "Sandbox.users.io/x": invalid label key: '
            f'"Sandbox.users.io/x": prefix part {SUBDOMAIN_MSG}',
            id="upper-case-prefix",
        ),
        pytest.param(
            {"labels": {("a" * 251) + ".io/x": "a"}},
            (),
            f'failed to validate label "{"a" * 251}.io/x": invalid label key: '
            f'"{"a" * 251}.io/x": prefix part must be no more than 253 bytes',
            id="long-prefix",
        ),
        pytest.param(
            {"labels": {"": "a"}},
            (),
            'failed to validate label "": invalid label key: "": name part must be non-empty; '
            f"name part {KEY_MSG}",
            id="empty-key",
        ),
        pytest.param(
            {"labels": {"sandbox.users.io/é": "a"}},
            (),
            'failed to validate label "sandbox.users.io/é": invalid label key: '
            f'"sandbox.users.io/é": name part {KEY_MSG}',
            id="non-ascii-key",
        ),
        pytest.param(
            {"annotations": {"kubernetes.io/x": "y"}},
            (),
            'failed to validate annotation "kubernetes.io/x": restricted system domain: '
            '"kubernetes.io/x" is not allowed in AdditionalPodMetadata',
            id="k8s-annotation",
        ),
        pytest.param(
            {"annotations": {"node.k8s.io/x": "y"}},
            (),
            'failed to validate annotation "node.k8s.io/x": restricted system domain: '
            '"node.k8s.io/x" is not allowed in AdditionalPodMetadata',
            id="k8s-subdomain-annotation",
        ),
        pytest.param(
            {"annotations": {"agents.x-k8s.io/pod-name": "y"}},
            (),
            'failed to validate annotation "agents.x-k8s.io/pod-name": restricted system domain: '
            '"agents.x-k8s.io/pod-name" is not allowed in AdditionalPodMetadata',
            id="agents-annotation",
        ),
        pytest.param(
            {"annotations": {"cluster-autoscaler.kubernetes.io/other": "y"}},
            (),
            'failed to validate annotation "cluster-autoscaler.kubernetes.io/other": restricted '
            'system domain: "cluster-autoscaler.kubernetes.io/other" is not allowed in '
            "AdditionalPodMetadata",
            id="only-the-exact-exempt-key",
        ),
        pytest.param(
            {"annotations": {"bad key": "y"}},
            (),
            'failed to validate annotation "bad key": invalid annotation key: "bad key": '
            f"name part {KEY_MSG}",
            id="bad-annotation-key",
        ),
        pytest.param(
            {"annotations": {"tab\tkey": "y"}},
            (),
            'failed to validate annotation "tab\\tkey": invalid annotation key: "tab\\tkey": '
            f"name part {KEY_MSG}",
            id="go-quoting",
        ),
        pytest.param(
            {
                "labels": {"sandbox.users.io/ok": "a", "zz": "a", "bb": "a"},
                "annotations": {"kubernetes.io/a": "b"},
            },
            (),
            'failed to validate label "bb": label "bb" must have a domain prefix (e.g. '
            "'sandbox.users.io/my-label') to prevent opting into unintended policy domains",
            id="labels-first-sorted",
        ),
    ],
)
def test_invalid_metadata(metadata: dict[str, Any], domains: tuple[str, ...], message: str) -> None:
    with pytest.raises(InvalidPodMetadataError) as info:
        validate_additional_pod_metadata(metadata, allowed_label_domains=domains)
    assert str(info.value) == message


def test_custom_allow_list_accepts_its_domains() -> None:
    validate_additional_pod_metadata(
        {"labels": {"corp.example/a": "1", "team.corp.example/b": "2"}},
        allowed_label_domains=("corp.example", "other.io"),
    )


# --- merge ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "extra", "expected"),
    [
        pytest.param({}, None, {}, id="nothing"),
        pytest.param({}, {}, {}, id="empty-extra"),
        pytest.param(
            {"labels": {"a": "1"}},
            {"labels": {"b": "2"}, "annotations": {"x": "y"}},
            {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}},
            id="union",
        ),
        pytest.param(
            {"labels": {"a": "1"}, "annotations": {"x": "y"}},
            {"labels": {"a": "1"}, "annotations": {"x": "y"}},
            {"labels": {"a": "1"}, "annotations": {"x": "y"}},
            id="same-values-ok",
        ),
        pytest.param(
            {"labels": {"a": "1"}, "name": "keep"},
            {"annotations": {}},
            {"labels": {"a": "1"}, "name": "keep"},
            id="other-keys-kept",
        ),
    ],
)
def test_merge(
    base: dict[str, Any], extra: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    before = repr(base), repr(extra)
    merged = merge_without_overrides(base, extra)
    assert merged == expected
    assert (repr(base), repr(extra)) == before
    if "labels" in merged and "labels" in base:
        assert merged["labels"] is not base["labels"]


@pytest.mark.parametrize(
    ("base", "extra", "message"),
    [
        pytest.param(
            {"labels": {"k": "t"}},
            {"labels": {"k": "c"}},
            'metadata override conflict: label "k" is defined in template with value "t", but '
            'claim requests "c"',
            id="label",
        ),
        pytest.param(
            {"annotations": {"k": "t"}},
            {"annotations": {"k": ""}},
            'metadata override conflict: annotation "k" is defined in template with value "t", '
            'but claim requests ""',
            id="annotation",
        ),
        pytest.param(
            {"labels": {"b": "1", "a": "1"}, "annotations": {"a": "1"}},
            {"labels": {"b": "2", "a": "2"}, "annotations": {"a": "2"}},
            'metadata override conflict: label "a" is defined in template with value "1", but '
            'claim requests "2"',
            id="labels-first-sorted",
        ),
    ],
)
def test_merge_conflict(base: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    with pytest.raises(MetadataOverrideError) as info:
        merge_without_overrides(base, extra)
    assert str(info.value) == message
