"""Compatibility: our generated CRDs against upstream v0.5.4's, compared structurally.

Each CRD is flattened per version into ``path#facet`` entries (types, formats, required, enums,
defaults, patterns, limits, every ``x-kubernetes-*`` marker, CEL rules) plus printer columns,
subresources, served/storage/deprecation, names and the conversion stanza. Every difference is
printed; the test passes only when each one is listed, with a reason, in
``crd_compat_allowlist.yaml`` (and every listed entry still is a difference).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.api.crdgen import build_crd, crd_file_name
from kube_agent_sandbox.api.registry import KINDS
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.reference import missing_reason, reference_dir, reference_files

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[3]
_ALLOWLIST = _HERE / "crd_compat_allowlist.yaml"
# Kinds upstream does not have (nothing to be compatible with).
_OURS_ONLY = frozenset({"SandboxSnapshot"})
_UPSTREAM_KINDS = tuple(info for info in KINDS if info.kind not in _OURS_ONLY)

_SCHEMA_FACETS = (
    "type",
    "format",
    "required",
    "enum",
    "default",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "nullable",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-validations",
)
_STRUCTURE_KEYS = frozenset({"properties", "items", "additionalProperties", "description"})


def flatten_schema(node: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """``{"<path>#<facet>": value}`` for every facet of every node, plus unknown keys."""
    out: dict[str, Any] = {f"{path or '.'}#node": True}
    for key, value in node.items():
        if key in _STRUCTURE_KEYS:
            continue
        facet = key if key in _SCHEMA_FACETS else f"unknown:{key}"
        out[f"{path or '.'}#{facet}"] = value
    for name, child in node.get("properties", {}).items():
        out.update(flatten_schema(child, f"{path}.{name}"))
    if isinstance(node.get("items"), Mapping):
        out.update(flatten_schema(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), Mapping):
        out.update(flatten_schema(node["additionalProperties"], f"{path}{{}}"))
    return out


def flatten_crd(crd: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten a whole CRD into comparable entries keyed by version and path."""
    spec = crd["spec"]
    out: dict[str, Any] = {
        "crd#name": crd["metadata"]["name"],
        "crd#group": spec["group"],
        "crd#scope": spec["scope"],
        "crd#conversion": spec.get("conversion"),
    }
    for key, value in spec["names"].items():
        out[f"crd#names.{key}"] = value
    for version in spec["versions"]:
        prefix = f"{version['name']}:"
        for key in ("served", "storage", "deprecated", "deprecationWarning"):
            out[f"{prefix}#{key}"] = version.get(key)
        out[f"{prefix}#additionalPrinterColumns"] = version.get("additionalPrinterColumns")
        out[f"{prefix}#subresources"] = version.get("subresources")
        schema = version["schema"]["openAPIV3Schema"]
        for key, value in flatten_schema(schema).items():
            out[f"{prefix}{key}"] = value
    return out


def compare_crds(ours: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """Every difference as ``<entry>: ours=<v> reference=<v>`` (sorted; empty = equal)."""
    mine, theirs = flatten_crd(ours), flatten_crd(reference)
    missing = object()
    differences = []
    for key in sorted(set(mine) | set(theirs)):
        a, b = mine.get(key, missing), theirs.get(key, missing)
        if a != b:
            shown_a = "<absent>" if a is missing else repr(a)
            shown_b = "<absent>" if b is missing else repr(b)
            differences.append(f"{key}: ours={shown_a} reference={shown_b}")
    return differences


def _reference_crds_dir() -> Path:
    if not reference_files("crds"):
        unavailable(missing_reason("crds"))
    return reference_dir() / "crds"


def _allowlist() -> dict[tuple[str, str], str | None]:
    """``{(crd file, entry): the exact difference text expected, or None for any}``."""
    document = yaml.safe_load(_ALLOWLIST.read_text(encoding="utf-8")) or {}
    entries = document.get("allowed") or []
    allowed: dict[tuple[str, str], str | None] = {}
    for entry in entries:
        assert entry.get("reason"), f"allow-list entry without a reason: {entry}"
        allowed[(entry["crd"], entry["entry"])] = entry.get("difference")
    return allowed


def unexplained_differences(
    name: str, differences: list[str], allowed: Mapping[tuple[str, str], str | None]
) -> list[str]:
    """The differences of CRD ``name`` that the allow-list does not explain.

    An entry explains a difference at its path; with ``difference`` set it explains only
    exactly that (e.g. ``ours='int64' reference=<absent>``), so a changed value still fails.
    """
    unexplained = []
    for difference in differences:
        entry, _, rest = difference.partition(": ")
        key = (name, entry)
        if key not in allowed or (allowed[key] is not None and allowed[key] != rest):
            unexplained.append(difference)
    return unexplained


@pytest.mark.parametrize("info", _UPSTREAM_KINDS, ids=lambda info: info.kind)
def test_generated_crd_matches_upstream(info: Any) -> None:
    name = crd_file_name(info)
    reference = yaml.safe_load((_reference_crds_dir() / name).read_text(encoding="utf-8"))
    differences = compare_crds(build_crd(info), reference)
    allowed = _allowlist()
    for difference in differences:
        print(f"{name}: {difference}")  # the report is the point of this test
    unexplained = unexplained_differences(name, differences, allowed)
    assert unexplained == [], "differences not in crd_compat_allowlist.yaml"
    present = {d.partition(": ")[0] for d in differences}
    stale = [entry for (crd, entry) in allowed if crd == name and entry not in present]
    assert stale == [], "allow-list entries that are no longer differences"


def test_generated_files_on_disk_match_reference_file_names() -> None:
    reference_names = sorted(p.name for p in _reference_crds_dir().glob("*.yaml"))
    assert sorted(crd_file_name(info) for info in _UPSTREAM_KINDS) == reference_names


@pytest.fixture
def sandbox_crd() -> dict[str, Any]:
    return build_crd(KINDS[0])


def _spec_schema(crd: dict[str, Any], version: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][version]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize(
    ("mutate", "expected_entry"),
    [
        (
            lambda crd: _spec_schema(crd)["properties"]["spec"]["properties"].pop("service"),
            "v1beta1:.spec.service#node",
        ),
        (
            lambda crd: _spec_schema(crd)["properties"]["spec"]["properties"][
                "shutdownPolicy"
            ].__setitem__("default", "Delete"),
            "v1beta1:.spec.shutdownPolicy#default",
        ),
        (
            lambda crd: _spec_schema(crd)["properties"]["spec"].pop("x-kubernetes-validations"),
            "v1beta1:.spec#x-kubernetes-validations",
        ),
        (
            lambda crd: crd["spec"]["versions"][0].pop("additionalPrinterColumns"),
            "v1beta1:#additionalPrinterColumns",
        ),
        (
            lambda crd: crd["spec"]["names"].__setitem__("shortNames", ["sbx"]),
            "crd#names.shortNames",
        ),
        (
            lambda crd: _spec_schema(crd)["properties"]["spec"]["properties"]["podTemplate"][
                "properties"
            ]["spec"]["properties"]["containers"].pop("x-kubernetes-list-map-keys"),
            "v1beta1:.spec.podTemplate.spec.containers#x-kubernetes-list-map-keys",
        ),
        (
            lambda crd: crd["spec"]["conversion"]["webhook"].__setitem__(
                "conversionReviewVersions", ["v1"]
            ),
            "crd#conversion",
        ),
    ],
)
def test_comparator_reports_each_kind_of_difference(
    sandbox_crd: dict[str, Any], mutate: Any, expected_entry: str
) -> None:
    changed = copy.deepcopy(sandbox_crd)
    mutate(changed)
    differences = compare_crds(changed, sandbox_crd)
    assert expected_entry in [d.split(": ours=", 1)[0] for d in differences]


def test_comparator_finds_no_difference_between_equal_crds(sandbox_crd: dict[str, Any]) -> None:
    assert compare_crds(sandbox_crd, copy.deepcopy(sandbox_crd)) == []


# --- The intended v0.5.6 difference is allowed narrowly -----------------------------------------

_WARM_POOL = next(info for info in KINDS if info.kind == "SandboxWarmPool")
_WARM_POOL_FILE = crd_file_name(_WARM_POOL)


def _status_properties(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            properties: dict[str, Any] = served["schema"]["openAPIV3Schema"]["properties"][
                "status"
            ]["properties"]
            return properties
    raise AssertionError(version)


def _without_observed_generation() -> dict[str, Any]:
    """Our warm pool CRD as upstream v0.5.4 had it (no status.observedGeneration)."""
    crd = build_crd(_WARM_POOL)
    _status_properties(crd, "v1beta1").pop("observedGeneration")
    return crd


def test_observed_generation_is_the_only_allowed_warm_pool_difference() -> None:
    ours = build_crd(_WARM_POOL)
    differences = compare_crds(ours, _without_observed_generation())
    assert sorted(d.partition(": ")[0] for d in differences) == [
        "v1beta1:.status.observedGeneration#format",
        "v1beta1:.status.observedGeneration#minimum",
        "v1beta1:.status.observedGeneration#node",
        "v1beta1:.status.observedGeneration#type",
    ]
    assert unexplained_differences(_WARM_POOL_FILE, differences, _allowlist()) == []
    assert "observedGeneration" not in _status_properties(ours, "v1alpha1")


@pytest.mark.parametrize(
    ("mutate", "expected_entry"),
    [
        (
            lambda crd: _status_properties(crd, "v1beta1")["observedGeneration"].__setitem__(
                "format", "int32"
            ),
            "v1beta1:.status.observedGeneration#format",
        ),
        (
            lambda crd: _status_properties(crd, "v1beta1")["observedGeneration"].__setitem__(
                "minimum", 1
            ),
            "v1beta1:.status.observedGeneration#minimum",
        ),
        (
            lambda crd: _status_properties(crd, "v1alpha1").__setitem__(
                "observedGeneration", {"type": "integer", "format": "int64", "minimum": 0}
            ),
            "v1alpha1:.status.observedGeneration#node",
        ),
        (
            lambda crd: _status_properties(crd, "v1beta1").__setitem__(
                "observedGenerations", {"type": "integer"}
            ),
            "v1beta1:.status.observedGenerations#node",
        ),
    ],
)
def test_other_warm_pool_differences_are_not_allowed(mutate: Any, expected_entry: str) -> None:
    ours = build_crd(_WARM_POOL)
    mutate(ours)
    differences = compare_crds(ours, _without_observed_generation())
    unexplained = unexplained_differences(_WARM_POOL_FILE, differences, _allowlist())
    assert expected_entry in [d.partition(": ")[0] for d in unexplained]
