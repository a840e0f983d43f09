"""Volume claim templates of a cold-started Sandbox: validation, policies, texts.

Upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go, mergeVolumeClaimTemplates.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_agent_sandbox.extensions.claim.volumes import (
    VolumeClaimTemplatesError,
    VolumeClaimTemplatesPolicyError,
    merge_volume_claim_templates,
    validate_volume_claim_templates,
)


def _vct(name: str, size: str = "1Gi") -> dict[str, Any]:
    vct: dict[str, Any] = {"spec": {"resources": {"requests": {"storage": size}}}}
    if name:
        vct["metadata"] = {"name": name}
    return vct


def _names(vcts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(v["metadata"]["name"], v["spec"]["resources"]["requests"]["storage"]) for v in vcts]


@pytest.mark.parametrize(
    ("vcts", "prefix", "message"),
    [
        pytest.param(None, "", None, id="none"),
        pytest.param([], "", None, id="empty"),
        pytest.param([_vct("a"), _vct("b")], "", None, id="unique"),
        pytest.param(
            [_vct("a"), _vct("")],
            "",
            "invalid volume claim templates: name at index 1 is empty",
            id="empty-name",
        ),
        pytest.param(
            [{"spec": {}}],
            "",
            "invalid volume claim templates: name at index 0 is empty",
            id="no-metadata",
        ),
        pytest.param(
            [_vct("a"), _vct("b"), _vct("a"), _vct("")],
            "x: ",
            'x: invalid volume claim templates: duplicate name "a"',
            id="duplicate-first-problem-wins",
        ),
    ],
)
def test_validate(vcts: list[dict[str, Any]] | None, prefix: str, message: str | None) -> None:
    if message is None:
        validate_volume_claim_templates(vcts, prefix=prefix)
        return
    with pytest.raises(VolumeClaimTemplatesError) as info:
        validate_volume_claim_templates(vcts, prefix=prefix)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("template", "claim", "policy", "expected"),
    [
        pytest.param(None, None, "", [], id="nothing"),
        pytest.param([_vct("t")], None, "Disallowed", [("t", "1Gi")], id="template-only"),
        pytest.param([_vct("t")], [], "", [("t", "1Gi")], id="empty-claim-list"),
        pytest.param(
            [_vct("t")],
            [_vct("c", "2Gi")],
            "Allowed",
            [("t", "1Gi"), ("c", "2Gi")],
            id="allowed-appends",
        ),
        pytest.param(None, [_vct("c")], "Allowed", [("c", "1Gi")], id="allowed-no-template"),
        pytest.param(
            [_vct("a"), _vct("b"), _vct("c")],
            [_vct("new2", "5Gi"), _vct("b", "9Gi"), _vct("new1", "3Gi")],
            "Overrides",
            [("a", "1Gi"), ("b", "9Gi"), ("c", "1Gi"), ("new2", "5Gi"), ("new1", "3Gi")],
            id="overrides-replace-in-place-then-append",
        ),
        pytest.param(
            [_vct("a")],
            [_vct("b")],
            "Overrides",
            [("a", "1Gi"), ("b", "1Gi")],
            id="overrides-without-clash",
        ),
    ],
)
def test_merge(
    template: list[dict[str, Any]] | None,
    claim: list[dict[str, Any]] | None,
    policy: str,
    expected: list[tuple[str, str]],
) -> None:
    before = copy.deepcopy((template, claim))
    merged = merge_volume_claim_templates(template, claim, policy=policy)
    assert _names(merged) == expected
    assert (template, claim) == before
    for vct in merged:  # deep copies: the caller may mutate the result
        assert all(vct is not other for other in (*(template or ()), *(claim or ())))
        assert all(
            vct["spec"] is not other["spec"] for other in (*(template or ()), *(claim or ()))
        )


@pytest.mark.parametrize(
    ("template", "claim", "policy", "message"),
    [
        pytest.param(
            [_vct("")],
            None,
            "Overrides",
            "invalid volume claim templates in template: invalid volume claim templates: name at "
            "index 0 is empty",
            id="template-only-invalid",
        ),
        pytest.param(
            [_vct("t"), _vct("t")],
            [_vct("c")],
            "Overrides",
            "failed to merge volume claim templates: template: invalid volume claim templates: "
            'duplicate name "t"',
            id="template-invalid",
        ),
        pytest.param(
            [_vct("t"), _vct("t")],
            [_vct("")],
            "Disallowed",
            "failed to merge volume claim templates: template: invalid volume claim templates: "
            'duplicate name "t"',
            id="template-checked-first",
        ),
        pytest.param(
            [_vct("t")],
            [_vct("c"), _vct("")],
            "Overrides",
            "failed to merge volume claim templates: claim: invalid volume claim templates: name "
            "at index 1 is empty",
            id="claim-invalid",
        ),
        pytest.param(
            [_vct("t")],
            [_vct("c"), _vct("c")],
            "Disallowed",
            "failed to merge volume claim templates: claim: invalid volume claim templates: "
            'duplicate name "c"',
            id="claim-checked-before-policy",
        ),
        pytest.param(
            [_vct("t")],
            [_vct("c")],
            "Disallowed",
            "failed to merge volume claim templates: volume claim templates are disallowed by the "
            "template",
            id="disallowed",
        ),
        pytest.param(
            None,
            [_vct("c")],
            "",
            "failed to merge volume claim templates: volume claim templates are disallowed by the "
            "template",
            id="unset-policy-disallows",
        ),
        pytest.param(
            [_vct("t"), _vct("u")],
            [_vct("x"), _vct("u")],
            "Allowed",
            "failed to merge volume claim templates: overriding volume claim templates is "
            'forbidden by the template: cannot override template volume "u"',
            id="allowed-refuses-override",
        ),
    ],
)
def test_merge_errors(
    template: list[dict[str, Any]] | None,
    claim: list[dict[str, Any]] | None,
    policy: str,
    message: str,
) -> None:
    with pytest.raises(VolumeClaimTemplatesError) as info:
        merge_volume_claim_templates(template, claim, policy=policy)
    assert str(info.value) == message


def test_unknown_policy_is_a_distinct_retried_error() -> None:
    with pytest.raises(VolumeClaimTemplatesPolicyError) as info:
        merge_volume_claim_templates([_vct("t")], [_vct("c")], policy="Sometimes")
    assert not isinstance(info.value, VolumeClaimTemplatesError)
    assert str(info.value) == (
        'failed to merge volume claim templates: unknown volume claim templates policy "Sometimes"'
    )
