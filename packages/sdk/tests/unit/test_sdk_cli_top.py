"""``agent-sandbox top``'s pure parts: quantities, rows, and the refreshing loop."""

from __future__ import annotations

import datetime

import pytest

from kube_agent_sandbox.sdk.cli import top

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("quantity", "millicores"),
    [("250m", 250.0), ("1", 1000.0), ("12345678n", 12.345678), ("3000u", 3.0)],
)
def test_cpu_quantities(quantity: str, millicores: float) -> None:
    assert top.cpu_millicores(quantity) == pytest.approx(millicores)


def test_memory_quantities_and_a_bad_one_counts_as_zero() -> None:
    assert top.memory_bytes("128Mi") == 128 * 2**20
    assert top.memory_bytes("1G") == 10**9
    used = top.pod_usage(
        {
            "containers": [
                {"usage": {"cpu": "100m", "memory": "64Mi"}},
                {"usage": {"cpu": "lots", "memory": "1Mi"}},
            ]
        }
    )
    assert used == top.Usage(100.0, 64 * 2**20)


def _sandbox(name: str, *, ready: bool, pod: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "creationTimestamp": "2026-01-01T11:00:00Z"}
    if pod is not None:
        meta["annotations"] = {"agents.x-k8s.io/pod-name": pod}
    return {
        "metadata": meta,
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "R"}]
        },
    }


def test_rows_show_usage_or_why_not() -> None:
    usage = {"box": top.Usage(120.4, 50 * 2**20)}
    assert top.sandbox_row(_sandbox("box", ready=True), usage, NOW)[-2:] == ["120m", "50Mi"]
    assert top.sandbox_row(_sandbox("idle", ready=False), usage, NOW)[-2:] == ["-", "-"]
    assert top.sandbox_row(_sandbox("box", ready=True), None, NOW)[-2:] == ["n/a", "n/a"]
    pool = {"metadata": {"name": "p"}, "spec": {"replicas": 3}, "status": {"readyReplicas": 1}}
    assert top.pool_row(pool, NOW) == ["p", "1", "3", "<unknown>"]


def test_live_mode_redraws_each_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    frames = [
        top.Frame([_sandbox("a", ready=True)], [], None),
        top.Frame([_sandbox("a", ready=True), _sandbox("b", ready=False)], [], None),
        top.Frame([], [], {}),
    ]
    sleeps: list[float] = []
    monkeypatch.setattr(top.time, "sleep", sleeps.append)
    top.run(lambda: frames.pop(0), once=False, interval=1.5, iterations=3)
    assert frames == []
    assert sleeps == [1.5, 1.5]
    assert "0 sandboxes, 0 ready; 0 warm pools" in capsys.readouterr().out
