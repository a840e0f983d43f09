"""RBAC rules as data: normalization, determinism, generated files and their content."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.controller import rbac, rbacgen
from kube_agent_sandbox.controller.rbac import (
    PolicyRule,
    normalize_manifest_rules,
    normalize_rules,
    rule,
)

REPO = Path(__file__).resolve().parents[4]


def _as_set(rules: list[PolicyRule]) -> set[tuple[str, str, tuple[str, ...], str]]:
    """Flatten rules into (group, resource, names, verb) atoms."""
    return {
        (g, r, tuple(sorted(x.resource_names)), v)
        for x in rules
        for g in x.api_groups
        for r in x.resources
        for v in x.verbs
    }


def test_merges_resources_and_groups() -> None:
    rules = normalize_rules(
        [
            rule("", "pods", ("get", "list")),
            rule("", "services", ("list", "get")),
            rule("", "events", "create"),
            rule("events.k8s.io", "events", "create"),
        ]
    )
    assert [r.to_dict() for r in rules] == [
        {"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]


def test_unions_verbs_of_the_same_resource() -> None:
    rules = normalize_rules([rule("a", "x", "get"), rule("a", "x", ("watch", "get", "create"))])
    assert rules == [PolicyRule(("a",), ("x",), ("create", "get", "watch"))]


def test_named_rules_stay_separate_from_unnamed() -> None:
    rules = normalize_rules(
        [
            rule("", "secrets", "create"),
            rule("", "secrets", "get", resource_names=("b", "a")),
        ]
    )
    assert [r.to_dict() for r in rules] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["a", "b"],
            "verbs": ["get"],
        },
    ]


def test_unknown_verbs_sort_after_known_ones() -> None:
    (merged,) = normalize_rules([rule("", "pods", ("escalate", "watch", "bind", "get"))])
    assert merged.verbs == ("get", "watch", "bind", "escalate")


def test_normalization_is_order_independent_and_lossless() -> None:
    declared = [
        *rbac.RUNTIME_RULES,
        *rbac.WEBHOOK_CLUSTER_RULES,
        rule("", ("pods", "services"), ("get", "list", "watch")),
        rule("", "pods", ("create", "delete")),
        rule("agents.x-k8s.io", ("sandboxes", "sandboxes/status"), ("get", "patch")),
    ]
    expected = normalize_rules(declared)
    rng = random.Random(4)
    for _ in range(20):
        shuffled = declared[:]
        rng.shuffle(shuffled)
        assert normalize_rules(shuffled) == expected
    assert _as_set(expected) == _as_set(declared)


@pytest.mark.parametrize(
    "declared",
    [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": "", "resources": "pods", "verbs": "get"},
    ],
)
def test_manifest_rules_are_read_back(declared: dict[str, Any]) -> None:
    assert PolicyRule.from_dict(declared) == PolicyRule(("",), ("pods",), ("get",))


def test_manifest_rules_keep_resource_names() -> None:
    declared = {
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get"],
        "resourceNames": ["s"],
    }
    assert PolicyRule.from_dict(declared).resource_names == ("s",)


@pytest.mark.parametrize("declared", [42, "pods", None, object()])
def test_non_mappings_are_not_manifest_rules(declared: Any) -> None:
    with pytest.raises(TypeError, match="not an RBAC rule"):
        PolicyRule.from_dict(declared)


@pytest.mark.parametrize(
    "declared",
    [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        type("RuleLike", (), {"api_groups": [""], "resources": ["pods"], "verbs": ["get"]})(),
        42,
    ],
)
def test_normalize_takes_only_policy_rules(declared: Any) -> None:
    """Declarations are typed: a dict or a look-alike is refused, not guessed at."""
    with pytest.raises(TypeError, match="not a PolicyRule"):
        normalize_rules([rule("", "pods", "get"), declared])


@pytest.mark.parametrize(
    "declared",
    [
        {"apiGroups": [""], "resources": ["pods"], "verbs": []},
        {"apiGroups": [], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": [], "verbs": ["get"]},
    ],
)
def test_incomplete_rules_are_refused(declared: dict[str, list[str]]) -> None:
    with pytest.raises(ValueError, match="incomplete rule"):
        normalize_manifest_rules([declared])


@pytest.mark.parametrize("verb", ["create", "list", "watch", "deletecollection"])
def test_resource_names_cannot_restrict_unnamed_verbs(verb: str) -> None:
    with pytest.raises(ValueError, match="cannot be restricted by resourceNames"):
        rule("", "secrets", verb, resource_names=("x",))


def _render(core: list[PolicyRule], ext: list[PolicyRule]) -> dict[str, str]:
    files = rbacgen.render(
        core=core, webhook=normalize_rules(rbac.WEBHOOK_NAMESPACED_RULES), extensions=ext
    )
    return {f.path: f.content or "" for f in files}


def test_render_shapes() -> None:
    files = _render(normalize_rules(rbac.RUNTIME_RULES), [])
    core = yaml.safe_load(files[rbacgen.CORE_FILE])
    assert core["kind"] == "ClusterRole"
    assert core["metadata"] == {"name": "agent-sandbox-controller"}
    role = yaml.safe_load(files[rbacgen.WEBHOOK_FILE])
    assert role["kind"] == "Role"
    assert role["metadata"] == {
        "name": "agent-sandbox-controller",
        "namespace": "agent-sandbox-system",
    }
    ext = yaml.safe_load(files[rbacgen.EXTENSIONS_FILE])
    assert ext["metadata"] == {"name": "agent-sandbox-controller-extensions"}
    assert ext["rules"] == []
    for content in files.values():
        assert content.startswith(rbacgen.HEADER)


def test_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rbacgen.main(["--output-dir", str(tmp_path)]) == 0
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.yaml"))
    assert written == sorted([rbacgen.CORE_FILE, rbacgen.WEBHOOK_FILE, rbacgen.EXTENSIONS_FILE])
    first = {p: (tmp_path / p).read_bytes() for p in written}
    assert rbacgen.main(["--output-dir", str(tmp_path)]) == 0
    assert {p: (tmp_path / p).read_bytes() for p in written} == first  # deterministic
    assert rbacgen.main(["--check", "--output-dir", str(tmp_path)]) == 0


def test_check_fails_on_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rbacgen.main(["--output-dir", str(tmp_path)]) == 0
    core = tmp_path / rbacgen.CORE_FILE
    core.write_text(core.read_text().replace("- watch\n", "", 1))
    capsys.readouterr()
    assert rbacgen.main(["--check", "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "+  - watch" in err
    assert "RBAC manifests are stale" in err


def test_check_fails_on_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rbacgen.main(["--output-dir", str(tmp_path)]) == 0
    (tmp_path / rbacgen.WEBHOOK_FILE).unlink()
    assert rbacgen.main(["--check", "--output-dir", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err


def test_committed_manifests_are_current() -> None:
    assert rbacgen.main(["--check", "--output-dir", str(REPO / "manifests" / "rbac")]) == 0


def test_find_rbac_dir(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert rbacgen.find_rbac_dir(nested) == tmp_path / "manifests" / "rbac"
    with pytest.raises(FileNotFoundError):
        rbacgen.find_rbac_dir(Path("/"))


# --- the generated core ClusterRole against upstream v0.5.6 k8s/rbac.generated.yaml ---------------


def _core_atoms() -> set[tuple[str, str, tuple[str, ...], str]]:
    return _as_set(rbacgen.core_rules())


def test_core_role_grants_what_the_controller_uses() -> None:
    atoms = _core_atoms()
    for resource in ("pods", "services", "persistentvolumeclaims"):
        for verb in ("get", "list", "watch", "create", "patch", "update", "delete"):
            assert ("", resource, (), verb) in atoms
    for verb in ("get", "list", "watch", "patch", "update", "delete"):
        assert ("agents.x-k8s.io", "sandboxes", (), verb) in atoms
    assert ("agents.x-k8s.io", "sandboxes/status", (), "patch") in atoms
    assert ("events.k8s.io", "events", (), "create") in atoms
    assert ("coordination.k8s.io", "leases", (), "create") in atoms
    lease = ("a3317529.agent-sandbox.x-k8s.io",)
    assert {v for g, r, n, v in atoms if r == "leases" and n == lease} == {"get", "update"}
    crds = {n for g, r, n, v in atoms if r == "customresourcedefinitions"}
    assert crds == {
        (
            "sandboxclaims.extensions.agents.x-k8s.io",
            "sandboxes.agents.x-k8s.io",
            "sandboxsnapshots.extensions.agents.x-k8s.io",
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "sandboxwarmpools.extensions.agents.x-k8s.io",
        )
    }


def test_core_role_is_narrower_than_upstream_where_documented() -> None:
    """Deliberate differences from upstream's k8s/rbac.generated.yaml (docs/reference/rbac.md)."""
    atoms = _core_atoms()
    # Leases: no list/watch/patch, and get/update only on our Lease.
    assert not {a for a in atoms if a[1] == "leases" and a[3] in ("list", "watch", "patch")}
    assert ("coordination.k8s.io", "leases", (), "get") not in atoms
    # CRDs: no update (merge patch only), never unnamed.
    assert not {a for a in atoms if a[1] == "customresourcedefinitions" and a[3] == "update"}
    assert not {a for a in atoms if a[1] == "customresourcedefinitions" and not a[2]}
    # Nothing cluster-wide on secrets.
    assert not {a for a in atoms if a[1] == "secrets"}


def test_webhook_secret_role_is_name_scoped() -> None:
    atoms = _as_set(normalize_rules(rbac.WEBHOOK_NAMESPACED_RULES))
    assert atoms == {
        ("", "secrets", (), "create"),
        ("", "secrets", ("agent-sandbox-webhook-certs",), "get"),
    }


# --- extension plugins ---------------------------------------------------------------------------


# --- the Helm chart's copies of the rules --------------------------------------------------------

CHART = REPO / "charts" / "agent-sandbox"
CHART_FILES = (
    rbacgen.CHART_CONTROLLER_FILE,
    rbacgen.CHART_LEADER_ELECTION_FILE,
    rbacgen.CHART_WEBHOOK_FILE,
    rbacgen.CHART_EXTENSIONS_FILE,
)


def _role_rules(path: Path) -> list[PolicyRule]:
    document = yaml.safe_load(path.read_text())
    return normalize_manifest_rules(document["rules"])


def _list_rules(path: Path) -> list[PolicyRule]:
    rules = yaml.safe_load(path.read_text())
    assert isinstance(rules, list)
    return normalize_manifest_rules(rules)


def test_chart_dir_alone_writes_only_the_chart_files(tmp_path: Path) -> None:
    assert rbacgen.main(["--chart-dir", str(tmp_path)]) == 0
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.yaml"))
    assert written == sorted(CHART_FILES)
    for name in CHART_FILES:
        assert (tmp_path / name).read_text().startswith(rbacgen.CHART_HEADER)
    assert rbacgen.main(["--check", "--chart-dir", str(tmp_path)]) == 0


def test_both_dirs_given_write_both(tmp_path: Path) -> None:
    manifests, chart = tmp_path / "rbac", tmp_path / "chart"
    assert rbacgen.main(["--output-dir", str(manifests), "--chart-dir", str(chart)]) == 0
    assert (manifests / rbacgen.CORE_FILE).is_file()
    assert (chart / rbacgen.CHART_CONTROLLER_FILE).is_file()


def test_check_fails_on_stale_chart_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rbacgen.main(["--chart-dir", str(tmp_path)]) == 0
    lease = tmp_path / rbacgen.CHART_LEADER_ELECTION_FILE
    lease.write_text(lease.read_text().replace("  - update\n", ""))
    capsys.readouterr()
    assert rbacgen.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "+  - update" in err
    assert "RBAC manifests are stale" in err
    (tmp_path / rbacgen.CHART_EXTENSIONS_FILE).unlink()
    assert rbacgen.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err


def test_committed_chart_files_are_current() -> None:
    assert rbacgen.main(["--check", "--chart-dir", str(CHART)]) == 0


def test_find_chart_dir(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    assert rbacgen.find_chart_dir(tmp_path) == tmp_path / "charts" / "agent-sandbox"


def test_chart_grants_what_the_manifests_grant(tmp_path: Path) -> None:
    """Same permissions as the kustomize roles, only the Lease moves to a namespaced Role."""
    assert rbacgen.main(["--output-dir", str(tmp_path / "m"), "--chart-dir", str(tmp_path)]) == 0
    manifests = tmp_path / "m"
    cluster = _list_rules(tmp_path / rbacgen.CHART_CONTROLLER_FILE)
    lease = _list_rules(tmp_path / rbacgen.CHART_LEADER_ELECTION_FILE)
    assert not {a for a in _as_set(cluster) if a[1] == "leases"}
    assert {a[1] for a in _as_set(lease)} == {"leases"}
    assert _as_set(cluster) | _as_set(lease) == _as_set(_role_rules(manifests / rbacgen.CORE_FILE))
    assert _list_rules(tmp_path / rbacgen.CHART_WEBHOOK_FILE) == _role_rules(
        manifests / rbacgen.WEBHOOK_FILE
    )
    assert _list_rules(tmp_path / rbacgen.CHART_EXTENSIONS_FILE) == _role_rules(
        manifests / rbacgen.EXTENSIONS_FILE
    )


def test_chart_follows_the_extension_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules a plugin declares reach the chart's extensions file without a hand edit."""
    declared = [rule("extensions.agents.x-k8s.io", "sandboxclaims", ("get", "watch"))]
    monkeypatch.setattr(rbacgen, "extension_rules", lambda: normalize_rules(declared))
    files = {f.path: f.content or "" for f in rbacgen.render_chart(rbacgen.chart_rules())}
    listed = yaml.safe_load(files[rbacgen.CHART_EXTENSIONS_FILE])
    assert normalize_manifest_rules(listed) == normalize_rules(declared)


def test_chart_templates_include_every_generated_file() -> None:
    templates = "".join(p.read_text() for p in (CHART / "templates").glob("*"))
    for name in CHART_FILES:
        assert f'.Files.Get "{name}"' in templates, name
