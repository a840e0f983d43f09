"""kwok's pod logs without a cluster: the CRI log text, the Logs rule, the flags, the option."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from kube_agent_sandbox.testing.kwok import (
    KWOK_LOG_KINDS,
    apiserver_kubelet_flags,
    kwok_log_crd_files,
    kwok_log_server_flags,
)
from kube_agent_sandbox.testing.plugin import provider_options
from kube_agent_sandbox.testing.podlogs import cri_log, logs_rule


def test_cri_log_stamps_each_line_in_order_in_utc() -> None:
    start = datetime(2026, 1, 2, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=1)))
    text = cri_log(["first", "", "third  spaced"], start=start, stream="stderr")
    assert text.splitlines() == [
        "2026-01-02T03:05:06.000007000Z stderr F first",
        "2026-01-02T03:05:06.000008000Z stderr F ",
        "2026-01-02T03:05:06.000009000Z stderr F third  spaced",
    ]
    assert text.endswith("\n")


def test_cri_log_refuses_line_breaks_and_naive_times() -> None:
    with pytest.raises(ValueError, match="line 1 holds a line break"):
        cri_log(["ok", "two\nlines"], start=datetime.now(UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        cri_log(["ok"], start=datetime(2026, 1, 1))


def test_logs_rule_names_the_pod_and_an_absolute_file(tmp_path: Path) -> None:
    rule = logs_rule("ns", "pod-1", tmp_path / "a.log")
    assert rule["kind"] == "Logs"
    assert rule["metadata"] == {"name": "pod-1", "namespace": "ns"}
    assert rule["spec"] == {"logs": [{"logsFile": str(tmp_path / "a.log")}]}
    with pytest.raises(ValueError, match="absolute log file path"):
        logs_rule("ns", "pod-1", Path("relative.log"))


def test_log_crds_come_from_kwoks_module_or_say_what_to_run(tmp_path: Path) -> None:
    stage_root = tmp_path / "kustomize" / "stage"
    bases = tmp_path / "kustomize" / "crd" / "bases"
    bases.mkdir(parents=True)
    with pytest.raises(Exception, match=r"kwok CRD not found .*nox -s testenv"):
        kwok_log_crd_files(stage_root)
    for name in ("logs", "clusterlogs"):
        (bases / f"kwok.x-k8s.io_{name}.yaml").write_text(yaml.safe_dump({"kind": name}))
    assert [f.name for f in kwok_log_crd_files(stage_root)] == [
        "kwok.x-k8s.io_logs.yaml",
        "kwok.x-k8s.io_clusterlogs.yaml",
    ]


def test_log_server_flags_advertise_the_port_and_verify_tls(tmp_path: Path) -> None:
    flags = kwok_log_server_flags(4242, tmp_path / "c.crt", tmp_path / "c.key")
    assert "--node-port=4242" in flags  # what the Node advertises to the API server
    assert "--server-address=127.0.0.1:4242" in flags  # loopback only
    assert f"--enable-crds={','.join(KWOK_LOG_KINDS)}" in flags
    apiserver = apiserver_kubelet_flags(tmp_path / "ca.crt")
    assert "--kubelet-preferred-address-types=InternalIP" in apiserver
    assert f"--kubelet-certificate-authority={tmp_path / 'ca.crt'}" in apiserver


def test_pod_logs_are_on_by_default_and_can_be_turned_off(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_SANDBOX_CLUSTER_POD_LOGS", raising=False)
    monkeypatch.setattr(pytestconfig.option, "cluster_pod_logs", None, raising=False)
    assert provider_options(pytestconfig)[1].pod_logs is True
    monkeypatch.setenv("AGENT_SANDBOX_CLUSTER_POD_LOGS", "off")
    assert provider_options(pytestconfig)[1].pod_logs is False
    monkeypatch.setattr(pytestconfig.option, "cluster_pod_logs", "on")
    assert provider_options(pytestconfig)[1].pod_logs is True
    monkeypatch.setattr(pytestconfig.option, "cluster_pod_logs", None)
    monkeypatch.setenv("AGENT_SANDBOX_CLUSTER_POD_LOGS", "yes")
    with pytest.raises(pytest.UsageError, match="must be 'on' or 'off'"):
        provider_options(pytestconfig)
