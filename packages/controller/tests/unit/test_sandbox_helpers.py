"""Pure helpers of the Sandbox controller: equality, merge patches, names, ports, expiry, cache."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from sandbox_fakes import NOW, FakeCluster, make_pod, make_sandbox, owner_ref

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.rbac import normalize_rules
from kube_agent_sandbox.controller.runtime import (
    apply_merge_patch,
    create_merge_patch,
    parse_quantity,
    semantic_equal,
)
from kube_agent_sandbox.controller.sandbox.expiry import check_expiry, parse_time
from kube_agent_sandbox.controller.sandbox.metrics import (
    LABEL_NAMES,
    SandboxCollector,
    register_collector,
    sandbox_labels,
)
from kube_agent_sandbox.controller.sandbox.pod import (
    merge_volume_claim_volumes,
    pod_name_hash_index,
    resolve_pod_name,
    update_pod_metadata,
)
from kube_agent_sandbox.controller.sandbox.service import service_ports_for_sandbox
from kube_agent_sandbox.controller.sandbox.setup import (
    RBAC_RULES,
    has_tracking_label,
    pod_cache_transform,
)
from kube_agent_sandbox.controller.sandbox.status import status_patch

json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    return value


class TestSemanticEqual:
    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ({}, {"x": None}),
            ({"x": []}, {}),
            ({"x": {}}, {"x": None}),
            ({"x": ""}, {}),
            (
                {"resources": {"requests": {"memory": "1Gi"}}},
                {"resources": {"requests": {"memory": "1024Mi"}}},
            ),
            ({"limits": {"cpu": "500m"}}, {"limits": {"cpu": "0.5"}}),
            ({"sizeLimit": "1k"}, {"sizeLimit": "1000"}),
        ],
    )
    def test_equal(self, a: Any, b: Any) -> None:
        assert semantic_equal(a, b)
        assert semantic_equal(b, a)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ({"x": "1Gi"}, {"x": "1024Mi"}),  # not a quantity field
            ({"x": 1}, {"x": "1"}),
            ({"x": True}, {"x": 1}),
            ({"x": [1, 2]}, {"x": [2, 1]}),
            ({"limits": {"cpu": "1"}}, {"limits": {"cpu": "2"}}),
            ({"x": 0}, {}),
        ],
    )
    def test_not_equal(self, a: Any, b: Any) -> None:
        assert not semantic_equal(a, b)

    @pytest.mark.parametrize(
        ("text", "value"),
        [
            ("1Gi", Decimal(2**30)),
            ("1.5Ki", Decimal(1536)),
            ("100m", Decimal("0.1")),
            ("1e3", Decimal(1000)),
            ("2E-2", Decimal("0.02")),
            ("3M", Decimal(3_000_000)),
            (".5", Decimal("0.5")),
            ("-1", Decimal(-1)),
        ],
    )
    def test_parse_quantity(self, text: str, value: Decimal) -> None:
        assert parse_quantity(text) == value

    @pytest.mark.parametrize("text", ["", "abc", "1Gb", "1 Gi", "--1"])
    def test_parse_quantity_rejects(self, text: str) -> None:
        assert parse_quantity(text) is None


class TestMergePatch:
    def test_diff(self) -> None:
        base = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1], "gone": "x"}
        modified = {"a": 1, "b": {"c": 2, "d": 4, "e": 5}, "l": [1, 2]}
        assert create_merge_patch(base, modified) == {
            "b": {"d": 4, "e": 5},
            "l": [1, 2],
            "gone": None,
        }

    def test_equal_gives_empty_patch(self) -> None:
        assert create_merge_patch({"a": {"b": [1]}}, {"a": {"b": [1]}}) == {}

    def test_type_change_is_replaced(self) -> None:
        assert create_merge_patch({"a": 1}, {"a": True}) == {"a": True}
        assert create_merge_patch({"a": {"x": 1}}, {"a": "s"}) == {"a": "s"}

    @given(json_objects, json_objects)
    def test_patch_turns_base_into_modified(
        self, base: dict[str, Any], modified: dict[str, Any]
    ) -> None:
        modified = _strip_nulls(modified)  # null cannot be a value in a merge-patched document
        assert apply_merge_patch(base, create_merge_patch(base, modified)) == modified


class TestResolvePodName:
    @pytest.mark.parametrize(
        ("annotations", "expected"),
        [
            (None, "sandbox-name"),
            ({"other": "x"}, "sandbox-name"),
            ({c.ANNOTATION_POD_NAME: ""}, "sandbox-name"),
            ({c.ANNOTATION_POD_NAME: "pool-abcde"}, "pool-abcde"),
        ],
    )
    def test_resolve(self, annotations: dict[str, str] | None, expected: str) -> None:
        assert resolve_pod_name(make_sandbox(annotations=annotations)) == expected


class TestMergeVolumeClaimVolumes:
    def test_no_claims_keeps_existing(self) -> None:
        existing = [{"name": "a"}]
        assert merge_volume_claim_volumes(existing, []) is existing
        assert merge_volume_claim_volumes(None, []) is None

    def test_claims_replace_same_name_and_go_last(self) -> None:
        existing = [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]
        claims = [{"name": "a", "persistentVolumeClaim": {"claimName": "a-s"}}]
        assert merge_volume_claim_volumes(existing, claims) == [
            {"name": "b", "emptyDir": {}},
            claims[0],
        ]

    def test_claims_into_none(self) -> None:
        claims = [{"name": "a"}]
        assert merge_volume_claim_volumes(None, claims) == claims


class TestServicePorts:
    def test_none_without_container_ports(self) -> None:
        assert service_ports_for_sandbox(make_sandbox()) is None
        assert (
            service_ports_for_sandbox(
                make_sandbox(containers=[{"name": "m", "ports": [{"containerPort": 0}]}])
            )
            is None
        )

    def test_generated_name_conflict_gets_suffix(self) -> None:
        containers = [
            {
                "name": "a",
                "ports": [{"containerPort": 9000, "name": "p-8080-tcp"}, {"containerPort": 8080}],
            },
            {"name": "b", "ports": [{"containerPort": 7000, "name": "p-8080-tcp-2"}]},
        ]
        ports = service_ports_for_sandbox(make_sandbox(containers=containers))
        assert ports is not None
        assert [(p["port"], p["name"]) for p in ports] == [
            (7000, "p-8080-tcp-2"),
            (8080, "p-8080-tcp-3"),
            (9000, "p-8080-tcp"),
        ]

    def test_first_explicit_name_kept_on_reuse(self) -> None:
        containers = [
            {
                "name": "a",
                "ports": [
                    {"containerPort": 80, "name": "web"},
                    {"containerPort": 81, "name": "web"},
                ],
            },
            {"name": "b", "ports": [{"containerPort": 80, "name": "other"}]},
        ]
        ports = service_ports_for_sandbox(make_sandbox(containers=containers))
        assert ports is not None
        assert [(p["port"], p["name"]) for p in ports] == [(80, "web"), (81, "p-81-tcp")]

    def test_same_port_different_protocols(self) -> None:
        containers = [
            {
                "name": "a",
                "ports": [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53}],
            }
        ]
        ports = service_ports_for_sandbox(make_sandbox(containers=containers))
        assert ports == [
            {"name": "p-53-tcp", "protocol": "TCP", "port": 53, "targetPort": 53},
            {"name": "p-53-udp", "protocol": "UDP", "port": 53, "targetPort": 53},
        ]

    def test_regular_init_containers_ignored(self) -> None:
        init = [{"name": "i", "restartPolicy": "OnFailure", "ports": [{"containerPort": 1}]}]
        assert service_ports_for_sandbox(make_sandbox(init_containers=init)) is None


class TestSandboxExpiry:
    def _sandbox(self, when: dt.datetime | None) -> dict[str, Any]:
        return make_sandbox(
            shutdown_time=None if when is None else when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        )

    def test_nil(self) -> None:
        assert check_expiry(self._sandbox(None), NOW) == (False, None)

    def test_future(self) -> None:
        assert check_expiry(self._sandbox(NOW + dt.timedelta(minutes=10)), NOW) == (False, 600.0)

    def test_exactly_now(self) -> None:
        assert check_expiry(self._sandbox(NOW), NOW) == (True, None)

    def test_less_than_two_seconds_requeues_after_two(self) -> None:
        assert check_expiry(self._sandbox(NOW + dt.timedelta(milliseconds=300)), NOW) == (
            False,
            2.0,
        )

    def test_past(self) -> None:
        assert check_expiry(self._sandbox(NOW - dt.timedelta(days=1)), NOW) == (True, None)

    @pytest.mark.parametrize(
        "text",
        [
            "2026-01-02T03:04:05Z",
            "2026-01-02T04:04:05+01:00",
            "2026-01-02T03:04:05.000000Z",
            "2026-01-02t03:04:05z",
        ],
    )
    def test_parse_time(self, text: str) -> None:
        assert parse_time(text) == NOW


class TestStatusPatch:
    def test_equal_means_no_write(self) -> None:
        old = {"conditions": [{"type": "Ready"}], "podIPs": []}
        assert (
            status_patch(old, {"conditions": [{"type": "Ready"}], "nodeName": "", "podIPs": None})
            is None
        )

    def test_cleared_fields_become_null(self) -> None:
        old = {"service": "s", "serviceFQDN": "f", "conditions": [{"type": "Ready"}]}
        new = {"service": "", "serviceFQDN": "", "conditions": [{"type": "Ready"}]}
        assert status_patch(old, new) == {"status": {"service": None, "serviceFQDN": None}}

    def test_node_name_only_waits_until_ready(self) -> None:
        not_ready = [{"type": "Ready", "status": "False"}]
        assert (
            status_patch({"conditions": not_ready}, {"conditions": not_ready, "nodeName": "n"})
            is None
        )
        ready = [{"type": "Ready", "status": "True"}]
        assert status_patch({"conditions": ready}, {"conditions": ready, "nodeName": "n"}) == {
            "status": {"nodeName": "n"}
        }

    def test_node_name_rides_along(self) -> None:
        patch = status_patch({"selector": "a"}, {"selector": "b", "nodeName": "n"})
        assert patch == {"status": {"selector": "b", "nodeName": "n"}}


class TestPodCacheTransform:
    def test_strips_spec_finalizers_managed_fields(self) -> None:
        pod = make_pod("p", finalizers=["f"], labels={"a": "b"})
        pod["metadata"]["managedFields"] = [{"manager": "kubelet"}]
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {"phase": "Running"}
        out = pod_cache_transform(pod)
        assert out["spec"] == {"nodeName": "node-1"}
        assert out["metadata"] == {"name": "p", "namespace": "default", "labels": {"a": "b"}}
        assert out["status"] == {"phase": "Running"}

    def test_unscheduled_pod_has_empty_spec(self) -> None:
        assert pod_cache_transform(make_pod("p"))["spec"] == {}

    async def test_merge_patch_unaffected(self) -> None:
        """Pod metadata patches computed from the transformed cache never touch spec."""
        from sandbox_fakes import hash_label, request, sandbox_ref

        from kube_agent_sandbox.api.rest import PODS

        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(template_labels={"new": "label"}))
        pod = make_pod(
            "sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox), finalizers=["keep/me"]
        )
        pod["spec"]["nodeName"] = "n"
        cluster.add(PODS, pod)
        await cluster.reconciler(pod_transform=pod_cache_transform).reconcile(request())
        patch = cluster.writes(PODS)[0].body
        assert set(patch) == {"metadata"}
        assert set(patch["metadata"]) == {"labels", "annotations"}
        stored = cluster.obj(PODS, "sandbox-name")
        assert stored is not None
        assert stored["metadata"]["finalizers"] == ["keep/me"]
        assert stored["spec"]["containers"] == pod["spec"]["containers"]
        assert stored["metadata"]["labels"]["new"] == "label"


class TestSetup:
    def test_tracking_label_predicate(self) -> None:
        labelled = make_pod("p", labels={c.LABEL_SANDBOX_NAME_HASH: "x"})
        plain = make_pod("p", labels={"a": "b"})
        assert has_tracking_label(None, labelled)
        assert has_tracking_label(plain, labelled)
        assert not has_tracking_label(labelled, plain)  # updates are judged by the new object
        assert has_tracking_label(labelled, None)
        assert not has_tracking_label(None, make_pod("p"))

    def test_rbac_rules_cover_every_write(self) -> None:
        rules = {
            (group, resource): set(r.verbs)
            for r in normalize_rules(RBAC_RULES)
            for group in r.api_groups
            for resource in r.resources
        }
        for resource in ("pods", "services", "persistentvolumeclaims"):
            assert {"get", "list", "watch", "create", "patch", "delete", "update"} <= rules[
                ("", resource)
            ]
        assert {"patch", "delete"} <= rules[(c.GROUP, "sandboxes")]
        assert "patch" in rules[(c.GROUP, "sandboxes/status")]
        assert "create" in rules[("events.k8s.io", "events")]

    def test_pod_index(self) -> None:
        assert pod_name_hash_index(make_pod("p", labels={c.LABEL_SANDBOX_NAME_HASH: "abc"})) == [
            "default/abc"
        ]
        assert pod_name_hash_index(make_pod("p")) == []


class TestUpdatePodMetadata:
    def test_no_change_on_converged_pod(self) -> None:
        sandbox = make_sandbox(template_labels={"a": "1"})
        pod = make_pod(
            "p",
            labels={c.LABEL_SANDBOX_NAME_HASH: "h", "a": "1"},
            annotations={c.ANNOTATION_PROPAGATED_LABELS: "a"},
        )
        assert not update_pod_metadata(pod, sandbox, "h")

    def test_pod_without_metadata_maps(self) -> None:
        pod: dict[str, Any] = {"metadata": {"name": "p"}}
        assert update_pod_metadata(pod, make_sandbox(), "h")
        assert pod["metadata"] == {"name": "p", "labels": {c.LABEL_SANDBOX_NAME_HASH: "h"}}


class TestMetrics:
    def _sandbox(self, **kwargs: Any) -> dict[str, Any]:
        return make_sandbox(**kwargs)

    def test_labels_of_bare_sandbox(self) -> None:
        assert sandbox_labels(make_sandbox()) == (
            "default",
            "false",
            "false",
            "cold",
            "unknown",
            "None",
            "unknown",
        )

    def test_labels_of_claimed_warm_sandbox(self) -> None:
        sandbox = make_sandbox(
            labels={c.LABEL_LAUNCH_TYPE: "warm", c.LABEL_CREATED_BY: "python-client"},
            annotations={c.ANNOTATION_SANDBOX_TEMPLATE_REF: "tmpl"},
            owner=owner_ref(
                "SandboxClaim", "claim", "u", api_version=f"{c.EXTENSIONS_GROUP}/v1alpha1"
            ),
            status={
                "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]
            },
        )
        assert sandbox_labels(sandbox) == (
            "default",
            "true",
            "false",
            "warm",
            "tmpl",
            "SandboxClaim",
            "python-client",
        )

    def test_labels_of_expired_sandbox_with_foreign_owner(self) -> None:
        sandbox = make_sandbox(
            labels={c.LABEL_CREATED_BY: "someone"},
            owner=owner_ref("Deployment", "d", "u", api_version="apps/v1"),
            status={
                "conditions": [{"type": "Ready", "status": "False", "reason": "SandboxExpired"}]
            },
        )
        assert sandbox_labels(sandbox) == (
            "default",
            "false",
            "true",
            "cold",
            "unknown",
            "None",
            "unknown",
        )

    def test_collector_counts_per_combination(self) -> None:
        cluster = FakeCluster()
        for name in ("a", "b"):
            cluster.add(SANDBOXES, make_sandbox(name))
        cluster.add(SANDBOXES, make_sandbox("c", namespace="other"))
        registry = CollectorRegistry()
        registry.register(SandboxCollector(cluster.readers()["sandboxes"]))
        text = generate_latest(registry).decode()
        assert (
            'agent_sandboxes{created_by="unknown",expired="false",launch_type="cold",namespace="default",'
            'owned_by="None",ready_condition="false",sandbox_template="unknown"} 2.0'
        ) in text
        assert 'namespace="other"' in text
        assert (
            registry.get_sample_value(
                "agent_sandboxes",
                {
                    "namespace": "other",
                    "ready_condition": "false",
                    "expired": "false",
                    "launch_type": "cold",
                    "sandbox_template": "unknown",
                    "owned_by": "None",
                    "created_by": "unknown",
                },
            )
            == 1.0
        )

    def test_collector_streams_the_cache_instead_of_listing_it(self) -> None:
        cluster = FakeCluster()
        for name in ("a", "b", "c"):
            cluster.add(SANDBOXES, make_sandbox(name))
        reader = cluster.readers()["sandboxes"]

        def no_list(*args: object, **kwargs: object) -> list[dict[str, object]]:
            raise AssertionError("a scrape must not materialize the whole cache")

        reader.list = no_list  # type: ignore[method-assign]
        registry = CollectorRegistry()
        registry.register(SandboxCollector(reader))
        total = sum(
            sample.value
            for family in registry.collect()
            if family.name == "agent_sandboxes"
            for sample in family.samples
        )
        assert total == 3

    def test_registering_twice_retargets_the_collector(self) -> None:
        first, second = FakeCluster(), FakeCluster()
        first.add(SANDBOXES, make_sandbox("a"))
        for name in ("b", "c"):
            second.add(SANDBOXES, make_sandbox(name))
        registry = CollectorRegistry()
        one = register_collector(registry, first.readers()["sandboxes"])
        two = register_collector(registry, second.readers()["sandboxes"])
        assert one is two
        labels = dict(zip(LABEL_NAMES, sandbox_labels(make_sandbox()), strict=True))
        assert registry.get_sample_value("agent_sandboxes", labels) == 2.0
