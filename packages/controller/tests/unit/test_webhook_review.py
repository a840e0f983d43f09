"""ConversionReview handling: success, failure, malformed reviews, both review versions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    ANNOTATION_V1BETA1_VCT_POLICY,
)
from kube_agent_sandbox.controller.webhook import review as review_module
from kube_agent_sandbox.controller.webhook.review import MalformedReviewError, handle_review

Obj = dict[str, Any]


def sandbox(api_version: str, name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}, **spec},
    }


def make_review(objects: Any, desired: Any, *, version: str = "v1", uid: Any = "req-1") -> Obj:
    return {
        "apiVersion": f"apiextensions.k8s.io/{version}",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_success_converts_every_object_in_order(version: str) -> None:
    objects = [
        sandbox("agents.x-k8s.io/v1alpha1", "a", replicas=0),
        sandbox("agents.x-k8s.io/v1alpha1", "b"),
        sandbox("agents.x-k8s.io/v1beta1", "c", operatingMode="Running"),
    ]

    answer = handle_review(make_review(objects, "agents.x-k8s.io/v1beta1", version=version))

    assert answer["apiVersion"] == f"apiextensions.k8s.io/{version}"
    assert answer["kind"] == "ConversionReview"
    assert "request" not in answer
    response = answer["response"]
    assert response["uid"] == "req-1"
    assert response["result"] == {"metadata": {}, "status": "Success"}
    converted = response["convertedObjects"]
    assert [o["metadata"]["name"] for o in converted] == ["a", "b", "c"]
    assert {o["apiVersion"] for o in converted} == {"agents.x-k8s.io/v1beta1"}
    assert [o["spec"]["operatingMode"] for o in converted] == ["Suspended", "Running", "Running"]
    assert ANNOTATION_V1ALPHA1_SANDBOX_STATE in converted[0]["metadata"]["annotations"]
    assert converted[2] == objects[2], "objects already in the desired version are unchanged"


def test_success_with_no_objects() -> None:
    answer = handle_review(make_review([], "agents.x-k8s.io/v1alpha1"))
    assert answer["response"]["convertedObjects"] == []
    assert answer["response"]["result"]["status"] == "Success"


def test_missing_objects_and_uid_are_treated_as_empty() -> None:
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"desiredAPIVersion": "agents.x-k8s.io/v1beta1"},
    }
    answer = handle_review(review)
    assert answer["response"] == {
        "uid": "",
        "convertedObjects": [],
        "result": {"metadata": {}, "status": "Success"},
    }


def test_one_bad_object_fails_the_whole_review_with_its_message() -> None:
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "t", "annotations": {ANNOTATION_V1BETA1_VCT_POLICY: "Sometimes"}},
        "spec": {"podTemplate": {"spec": {}}},
    }
    good = {**template, "metadata": {"name": "ok"}}

    answer = handle_review(
        make_review([good, template], "extensions.agents.x-k8s.io/v1beta1", uid="u-9")
    )

    assert answer["response"] == {
        "uid": "u-9",
        "result": {
            "metadata": {},
            "status": "Failure",
            "message": 'invalid VolumeClaimTemplatesPolicy annotation value: "Sometimes"',
        },
    }


@pytest.mark.parametrize(
    ("objects", "desired", "message"),
    [
        ([{"apiVersion": "v1", "kind": "Pod"}], "agents.x-k8s.io/v1beta1", "apiVersion 'v1'"),
        ([sandbox("agents.x-k8s.io/v1alpha1", "a")], "", "desired apiVersion: expected"),
        ([sandbox("agents.x-k8s.io/v1alpha1", "a")], "agents.x-k8s.io/v2", "desired apiVersion"),
        (["not an object"], "agents.x-k8s.io/v1beta1", "object: expected a JSON object"),
        ([None], "agents.x-k8s.io/v1beta1", "object: expected a JSON object"),
        (
            [{**sandbox("agents.x-k8s.io/v1alpha1", "a"), "spec": {"replicas": "one"}}],
            "agents.x-k8s.io/v1beta1",
            "spec.replicas: expected integer, got string",
        ),
    ],
)
def test_conversion_errors_become_failure_results(
    objects: list[Any], desired: str, message: str
) -> None:
    answer = handle_review(make_review(objects, desired))
    result = answer["response"]["result"]
    assert result["status"] == "Failure"
    assert result["message"].startswith(message)
    assert "convertedObjects" not in answer["response"]


def test_an_unexpected_exception_is_a_failure_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(obj: Any, to: str) -> Obj:
        raise RuntimeError("boom")

    monkeypatch.setattr(review_module, "convert", broken)
    answer = handle_review(make_review([{}], "agents.x-k8s.io/v1beta1"))
    assert answer["response"]["result"] == {
        "metadata": {},
        "status": "Failure",
        "message": "internal error: boom",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "body must be a JSON object"),
        ("review", "body must be a JSON object"),
        ({"kind": "ConversionReview"}, "unsupported ConversionReview apiVersion None"),
        (
            {"apiVersion": "apiextensions.k8s.io/v2", "kind": "ConversionReview"},
            "unsupported ConversionReview apiVersion 'apiextensions.k8s.io/v2'",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
            "unsupported ConversionReview apiVersion",
        ),
        (
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
            "kind must be 'ConversionReview', got 'AdmissionReview'",
        ),
        (
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"},
            "conversion request is nil",
        ),
        (
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": None},
            "conversion request is nil",
        ),
        (
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": []},
            "request must be a JSON object",
        ),
        (make_review([], "agents.x-k8s.io/v1beta1", uid=5), "request.uid must be a string"),
        (make_review({}, "agents.x-k8s.io/v1beta1"), "request.objects must be a list"),
        (make_review("x", "agents.x-k8s.io/v1beta1"), "request.objects must be a list"),
        (make_review([], ["v1"]), "request.desiredAPIVersion must be a string"),
    ],
)
def test_malformed_reviews_raise(body: Any, message: str) -> None:
    with pytest.raises(MalformedReviewError) as info:
        handle_review(body)
    assert str(info.value).startswith(message)


def test_answer_is_json_serializable() -> None:
    objects = [sandbox("agents.x-k8s.io/v1beta1", "a", operatingMode="Suspended")]
    answer = handle_review(make_review(objects, "agents.x-k8s.io/v1alpha1"))
    decoded = json.loads(json.dumps(answer))
    assert decoded["response"]["convertedObjects"][0]["spec"]["replicas"] == 0
