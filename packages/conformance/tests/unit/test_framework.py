"""Unit tests of the conformance framework: hashing, names, reports, runner arguments."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kube_agent_sandbox.conformance import report, runner
from kube_agent_sandbox.conformance.manifests import condition_types, has_condition, name_hash
from kube_agent_sandbox.conformance.plugin import namespace_name
from kube_agent_sandbox.conformance.resources import KNOWN_RESOURCES
from kube_agent_sandbox.conformance.target import Target


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "811c9dc5"),
        ("a", "e40c292c"),
        ("my-sandbox", "374de8f5"),
        ("sandbox-name", "ab179450"),
        ("test-pool", "59733166"),
        ("warmpool-0", "5317cfd3"),
    ],
)
def test_name_hash_matches_the_spec_vectors(text: str, expected: str) -> None:
    assert name_hash(text) == expected


@pytest.mark.parametrize(
    "test_name",
    ["test_simple", "test_x[param-With_CAPS/and.dots]", "t" * 200, "___"],
)
def test_namespace_names_are_valid_and_unique(test_name: str) -> None:
    names = {namespace_name("conf-prefix", test_name) for _ in range(20)}
    assert len(names) == 20
    for name in names:
        assert len(name) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
        assert name.startswith("conf-prefix-")


def test_resource_paths() -> None:
    sandbox = KNOWN_RESOURCES[("agents.x-k8s.io/v1beta1", "Sandbox")]
    assert sandbox.path("ns", "s") == "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/s"
    pod = KNOWN_RESOURCES[("v1", "Pod")]
    assert pod.path("ns") == "/api/v1/namespaces/ns/pods"
    namespace = KNOWN_RESOURCES[("v1", "Namespace")]
    assert namespace.path("ignored", "n") == "/api/v1/namespaces/n"


def test_condition_readers() -> None:
    obj = {
        "status": {
            "conditions": [
                {"type": "Suspended", "status": "False", "reason": "NotSuspended"},
                {"type": "Ready", "status": "True", "reason": "DependenciesReady"},
            ]
        }
    }
    assert condition_types(obj) == ["Suspended", "Ready"]
    assert has_condition(obj, "Ready", "True", "DependenciesReady")
    assert not has_condition(obj, "Ready", "False")
    assert not has_condition(obj, "Finished")
    assert condition_types(None) == []


def _report(nodeid: str, when: str, outcome: str, **extra: object) -> pytest.TestReport:
    longrepr: object = None
    if outcome == "failed":
        longrepr = "E   AssertionError: boom\nmore"
    if outcome == "skipped":
        longrepr = ("file.py", 1, "Skipped: not here")
    result = pytest.TestReport(nodeid, ("f.py", 1, nodeid), {}, outcome, longrepr, when)  # type: ignore[arg-type]
    for key, value in extra.items():
        setattr(result, key, value)
    return result


def test_collector_folds_phases_and_counts_per_section(tmp_path: Path) -> None:
    collector = report.Collector(cluster_version="v1.36.0")
    phases = {
        "t::ok": ["passed", "passed", "passed"],
        "t::bad": ["passed", "failed", "passed"],
        "t::teardown": ["passed", "passed", "failed"],
        "t::skip": ["skipped"],
    }
    for nodeid, outcomes in phases.items():
        for when, outcome in zip(("setup", "call", "teardown"), outcomes, strict=False):
            collector.add(
                _report(nodeid, when, outcome), sections=["3.3", "delta-3.2"], profile="core"
            )
    collector.add(
        _report("t::xf", "call", "skipped", wasxfail="our bug"), sections=["3.7"], profile="core"
    )
    summary = collector.summary(implementation="impl", cluster_version="v1.36.0")
    assert summary["totals"] == {"passed": 1, "failed": 2, "skipped": 1, "xfailed": 1}
    assert list(summary["sections"]) == ["3.3", "3.7", "delta-3.2"]
    assert summary["sections"]["3.3"] == {"passed": 1, "failed": 2, "skipped": 1, "xfailed": 0}
    assert summary["sections"]["3.7"]["xfailed"] == 1
    bad = next(t for t in summary["tests"] if t["nodeid"] == "t::bad")
    assert bad["message"] == "AssertionError: boom"

    report.write_json(summary, tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["implementation"] == "impl"
    report.write_markdown(summary, tmp_path / "s.md")
    text = (tmp_path / "s.md").read_text()
    assert "| §3.3 | 1 | 2 | 1 | 0 |" in text
    assert "| delta §3.2 | 1 | 2 | 1 | 0 |" in text
    assert "`t::xf` | xfailed | our bug" in text


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (None, ["core", "extensions"]),
        (["core"], ["core"]),
        (["core", "core"], ["core"]),
        (["all"], ["core", "extensions", "real-node"]),
    ],
)
def test_profiles(requested: list[str] | None, expected: list[str]) -> None:
    assert runner.profiles(requested) == expected


def test_pytest_arguments_select_profiles_and_reports(tmp_path: Path) -> None:
    args, extra = runner.parse_args(
        ["--profile", "core", "--report-dir", str(tmp_path), "--", "-k", "pod"]
    )
    assert extra == ["-k", "pod"]
    target = Target(kubeconfig=Path("/k"), implementation="x", image="img")
    argv = runner.pytest_args(args, target, ["core", "real-node"], extra)
    assert argv[argv.index("-m") + 1] == "core or real_node"
    assert f"--junitxml={tmp_path / 'junit.xml'}" in argv
    assert "--kubeconfig=/k" in argv
    assert "--conformance-image=img" in argv
    assert argv[-2:] == ["-k", "pod"]


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(SystemExit):
        runner.parse_args(["--profile", "bogus"])


def test_real_node_against_an_installed_cluster_defaults_to_a_shell_image() -> None:
    args, extra = runner.parse_args(["--kubeconfig", "/k", "--profile", "real-node"])
    target = Target(kubeconfig=Path("/k"), implementation="installed")
    argv = runner.pytest_args(args, target, ["real-node"], extra)
    assert f"--conformance-image={runner.REAL_NODE_IMAGE}" in argv
    kwok_only = runner.pytest_args(args, target, ["core"], extra)
    assert not any(a.startswith("--conformance-image") for a in kwok_only)
    args, extra = runner.parse_args(["--image", "mine:1"])
    assert "--conformance-image=mine:1" in runner.pytest_args(args, target, ["core"], extra)


def test_local_groups_split_real_node_from_kwok_profiles() -> None:
    assert runner.local_groups(["core", "extensions", "real-node"]) == [
        ["core", "extensions"],
        ["real-node"],
    ]
    assert runner.local_groups(["core"]) == [["core"]]
    assert runner.local_groups(["real-node"]) == [["real-node"]]


def test_report_is_embedded_below_the_docs_marker(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    intro = f"# Title\n\nIntro naming `{report.DOCS_MARKER}` inline.\n\n"
    page.write_text(f"{intro}{report.DOCS_MARKER}\n\nold report\n")
    summary = report.Collector().summary(implementation="impl", cluster_version="v1")
    report.embed_in_page(summary, page)
    report.embed_in_page(summary, page)  # idempotent
    text = page.read_text()
    assert text.startswith(intro)
    assert "old report" not in text
    assert text.count(report.DOCS_MARKER) == 2
    assert "- Implementation: `impl`" in text
    page.write_text("no marker")
    with pytest.raises(ValueError, match="no <!-- conformance-report --> line"):
        report.embed_in_page(summary, page)
