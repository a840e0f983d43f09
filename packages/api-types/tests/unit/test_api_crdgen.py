"""The CRD generator: freshness of the committed files, determinism, structural checks, CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml

from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.crdgen import (
    NonStructuralSchemaError,
    build_crd,
    check_structural,
    model_schema,
    render_all,
)
from kube_agent_sandbox.api.crdgen.__main__ import default_chart_crds_dir, default_output_dir, main
from kube_agent_sandbox.api.markers import CELRule, ListType, PrinterColumn, Subresources
from kube_agent_sandbox.api.registry import KINDS, kind_info
from kube_agent_sandbox.api.resources import ResourceNames

_REPO = Path(__file__).resolve().parents[4]


def test_committed_crds_are_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--output-dir", str(_REPO / "manifests" / "crds")]) == 0
    assert "up to date" in capsys.readouterr().out


def test_output_is_deterministic(rendered: dict[str, str]) -> None:
    assert render_all() == rendered


def test_write_then_check_then_detect_staleness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rendered: dict[str, str]
) -> None:
    out = tmp_path / "crds"
    assert main(["--check", "--output-dir", str(out)]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(rendered)
    assert main(["--check", "--output-dir", str(out)]) == 0
    capsys.readouterr()
    stale = out / "extensions.agents.x-k8s.io_sandboxwarmpools.yaml"
    stale.write_text(stale.read_text().replace("default: 1\n", "default: 2\n"))
    assert main(["--check", "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert "extensions.agents.x-k8s.io_sandboxwarmpools.yaml: stale (+1 -1 lines)" in err
    assert "-                default: 2" in err
    assert "+                default: 1" in err
    assert "1 CRD file(s) stale" in err


def test_default_output_dir_finds_the_repository(tmp_path: Path) -> None:
    assert default_output_dir(_REPO / "packages" / "api-types") == _REPO / "manifests" / "crds"
    assert default_output_dir(tmp_path) == tmp_path / "manifests" / "crds"


def test_default_chart_dir_is_the_charts_crds_folder(tmp_path: Path) -> None:
    chart = _REPO / "charts" / "agent-sandbox" / "crds"
    assert default_chart_crds_dir(_REPO / "packages" / "api-types") == chart
    assert default_chart_crds_dir(tmp_path) == tmp_path / "charts" / "agent-sandbox" / "crds"


def test_committed_chart_crds_are_fresh_copies(capsys: pytest.CaptureFixture[str]) -> None:
    chart = _REPO / "charts" / "agent-sandbox" / "crds"
    assert main(["--check", "--chart-dir", str(chart)]) == 0
    assert "up to date" in capsys.readouterr().out
    manifests = _REPO / "manifests" / "crds"
    assert sorted(p.name for p in chart.glob("*.yaml")) == sorted(render_all())
    for path in chart.glob("*.yaml"):
        assert path.read_bytes() == (manifests / path.name).read_bytes()


def test_chart_dir_selects_its_target_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests, chart = tmp_path / "manifests", tmp_path / "chart"
    assert main(["--chart-dir", str(chart)]) == 0
    assert sorted(p.name for p in chart.iterdir()) == sorted(render_all())
    assert not manifests.exists()
    assert main(["--output-dir", str(manifests), "--chart-dir", str(chart)]) == 0
    assert sorted(p.name for p in manifests.iterdir()) == sorted(render_all())
    stale = next(chart.iterdir())
    stale.write_text(stale.read_text() + "# edited\n")
    capsys.readouterr()
    assert main(["--check", "--output-dir", str(manifests), "--chart-dir", str(chart)]) == 1
    assert f"{stale.name}: stale" in capsys.readouterr().err


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_all()


def test_generated_files_parse_as_one_crd_each(rendered: dict[str, str]) -> None:
    for name, text in rendered.items():
        documents = [d for d in yaml.safe_load_all(text) if d]
        assert len(documents) == 1, name
        assert documents[0]["kind"] == "CustomResourceDefinition"


def test_sandbox_crd_facts() -> None:
    crd = build_crd(kind_info("agents.x-k8s.io", "Sandbox"))
    beta, alpha = crd["spec"]["versions"]
    assert (beta["name"], beta["storage"], beta["served"]) == ("v1beta1", True, True)
    assert (alpha["name"], alpha["storage"], alpha["served"], alpha["deprecated"]) == (
        "v1alpha1",
        False,
        True,
        True,
    )
    spec = beta["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["x-kubernetes-validations"][0]["message"] == "volumeClaimTemplates is immutable"
    assert (
        "x-kubernetes-validations" not in alpha["schema"]["openAPIV3Schema"]["properties"]["spec"]
    )
    assert spec["properties"]["operatingMode"] == {
        "default": "Running",
        "enum": ["Running", "Suspended"],
        "type": "string",
    }
    assert spec["properties"]["shutdownTime"] == {"format": "date-time", "type": "string"}
    assert beta["subresources"] == {"status": {}}
    assert alpha["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "name": "agent-sandbox-webhook-service",
        "namespace": "agent-sandbox-system",
        "path": "/convert",
    }


def test_no_schema_keeps_pydantic_artifacts() -> None:
    for info in KINDS:
        text = yaml.safe_dump(build_crd(info))
        for artifact in (
            "$ref",
            "$defs",
            "title:",
            "description:",
            "type: 'null'",
            "additionalProperties: false",
        ):
            assert artifact not in text, (info.kind, artifact)


# --- structural checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"a": {}}}, ".a: type is missing"),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/x", "type": "object"}}},
            "$ref is not allowed",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "object",
                        "properties": {},
                        "additionalProperties": {"type": "string"},
                    }
                },
            },
            "mutually exclusive",
        ),
        ({"type": "object", "additionalProperties": False}, "additionalProperties: false"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "array without items"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}},
            },
            "only value validations allowed",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "string"}]}
                },
            },
            "int-or-string anyOf",
        ),
        ({"type": "object", "required": ["spec"]}, "required property spec is not declared"),
        (
            {
                "type": "object",
                "properties": {
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}}}
                },
            },
            "only `type: object`",
        ),
    ],
)
def test_non_structural_schemas_are_refused(schema: dict[str, Any], problem: str) -> None:
    with pytest.raises(NonStructuralSchemaError) as info:
        check_structural(schema)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_structural_schema_passes() -> None:
    check_structural(
        {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "metadata": {"type": "object"},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "q": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True,
                },
            },
        }
    )


_TEST_NAMES = ResourceNames(
    group="test.example.com", kind="Widget", plural="widgets", short_names=()
)


class _WidgetSpec(KubeModel, validations=(CELRule(rule="self.size >= 0", message="negative"),)):
    size: int = 0
    tags: Annotated[list[str], ListType("set")] | None = None
    parts: Annotated[list[dict[str, str]], ListType("map", map_keys=("name",))] | None = None
    anything: Any = None


class _Widget(
    KubeObject,
    resource=_TEST_NAMES,
    version="v1",
    storage=True,
    subresources=Subresources(status=True),
    printer_columns=(PrinterColumn(name="Size", type="integer", json_path=".spec.size"),),
):
    spec: _WidgetSpec


def test_markers_reach_the_schema() -> None:
    schema = model_schema(_Widget)
    spec = schema["properties"]["spec"]
    assert spec["x-kubernetes-validations"] == [{"message": "negative", "rule": "self.size >= 0"}]
    assert spec["properties"]["tags"] == {
        "items": {"type": "string"},
        "type": "array",
        "x-kubernetes-list-type": "set",
    }
    assert spec["properties"]["parts"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["properties"]["size"] == {"default": 0, "type": "integer"}


def test_an_untyped_field_is_refused_by_the_generator() -> None:
    schema = model_schema(_Widget)
    with pytest.raises(NonStructuralSchemaError, match=r"\.spec\.anything: type is missing"):
        check_structural(schema)
