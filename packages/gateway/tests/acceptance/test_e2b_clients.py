"""Acceptance: the real E2B clients, unmodified, against the gateway (issue 14).

``e2b_scenario.py`` (imports only ``e2b`` and ``e2b_code_interpreter``) runs once per SDK
release in that release's own interpreter: the workspace's newest ``e2b`` with
``e2b-code-interpreter``, and ``e2b`` 2.45.1 (the v1 ``POST /sandboxes`` spelling) with the
newest code interpreter that accepts it. The clients are configured only as users configure
them: ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` (header routing) pointing at the gateway, and
``E2B_API_KEY`` from ``agent-sandbox-gateway keys create``. The control plane runs on the
local cluster's kwok nodes; the data plane reaches a local ``sandboxd`` and code interpreter
through the gateway's testing-only address override.

The hostname form (``https://<port>-<id>.<domain>`` with only ``E2B_DOMAIN``, no
``E2B_SANDBOX_URL``) runs in ``test_e2b_hostnames.py`` against a second, HTTPS gateway of the
same stack.

Set ``GATEWAY_ACCEPTANCE_RESULTS=<dir>`` to keep each run's JSON (steps and timings).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SCENARIO = Path(__file__).with_name("e2b_scenario.py")
SANDBOX_ID = re.compile(r"^[a-z0-9]{20}$")


@pytest.fixture(scope="module")
def scenario(gateway_stack: Any, e2b_python: tuple[str, Path]) -> dict[str, Any]:
    """Run the scenario with one SDK release; its parsed JSON report."""
    version, python = e2b_python
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "NO_PROXY": "127.0.0.1,localhost",
        "E2B_API_URL": gateway_stack.url,
        "E2B_SANDBOX_URL": gateway_stack.url,
        "E2B_API_KEY": gateway_stack.api_key,
        "SCENARIO_WORKDIR": str(gateway_stack.workdir),
        "SCENARIO_ROUND_TRIPS": "5",
        "SCENARIO_OTHER_TENANT_KEY": gateway_stack.other_tenant_key,
    }
    result = subprocess.run(
        [str(python), str(SCENARIO)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"{result.stderr}\n{gateway_stack.logs()}"
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    report["expected_e2b"] = version
    target = os.environ.get("GATEWAY_ACCEPTANCE_RESULTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / f"e2b-{version}.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _step(report: dict[str, Any], name: str) -> Any:
    value = report["steps"].get(name)
    assert not (isinstance(value, dict) and "error" in value), (
        f"step {name} failed with e2b {report['versions']['e2b']}: {value['error']}\n"
        f"{value.get('traceback', '')}"
    )
    return value


def test_the_intended_sdk_release_ran(scenario: dict[str, Any]) -> None:
    assert scenario["versions"]["e2b"] == scenario["expected_e2b"]
    assert scenario["versions"]["e2b_code_interpreter"] is not None


def test_an_unknown_key_is_refused(scenario: dict[str, Any]) -> None:
    assert _step(scenario, "unknown_key") == {"raised": "AuthenticationException"}


def test_another_tenants_key_cannot_reach_the_sandbox(scenario: dict[str, Any]) -> None:
    """Same answers as for an unknown id: the sandbox cannot even be probed."""
    other = _step(scenario, "other_tenant")
    for call in ("get_info", "connect", "set_timeout"):
        assert str(other[call]["raised"]).endswith("NotFoundException"), (call, other)
    assert other["kill"] == {"raised": None, "value": False}
    assert other["listed"] == {"raised": None, "value": 0}
    # ...and the sandbox was untouched: still running, still listed for its owner.
    assert _step(scenario, "list")["matching"] == [_step(scenario, "create")["sandbox_id"]]


def test_create_and_connect(scenario: dict[str, Any]) -> None:
    created = _step(scenario, "create")
    assert SANDBOX_ID.match(created["sandbox_id"]), created
    assert _step(scenario, "connect") == {"sandbox_id": created["sandbox_id"]}


def test_commands_stdout_stderr_env_and_exit_codes(scenario: dict[str, Any]) -> None:
    assert _step(scenario, "echo") == {"stdout": "hi\n", "stderr": "err\n", "exit_code": 0}
    # envVars of the create reach the processes (delivered by /init, never in the claim).
    assert _step(scenario, "env_var") == "from-create\n"
    failed = _step(scenario, "exit_code")
    assert failed["raised"] == "CommandExitException", failed
    assert failed["exit_code"] == 3


def test_streaming_output_arrives_while_the_command_runs(scenario: dict[str, Any]) -> None:
    streamed = _step(scenario, "streaming")
    assert "".join(streamed["chunks"]) == "line1\nline2\nline3\n"
    assert streamed["stdout"] == "line1\nline2\nline3\n"
    # The command sleeps 0.3 s after each line: a buffering proxy would deliver everything
    # at the end, in one chunk.
    assert len(streamed["chunks"]) >= 2, streamed
    assert streamed["first_chunk_seconds"] < streamed["total_seconds"] - 0.4, streamed


def test_files_write_read_list_exists(scenario: dict[str, Any], gateway_stack: Any) -> None:
    files = _step(scenario, "files")
    path = f"{gateway_stack.workdir}/acceptance-a.txt"
    assert files["written_path"] == path
    assert files["written_name"] == "acceptance-a.txt"
    assert files["read"] == "hello from e2b\n"
    assert files["cat"] == "hello from e2b\n"
    assert "acceptance-a.txt" in files["listed"]
    assert files["exists"] is True
    assert files["exists_missing"] is False
    assert _step(scenario, "throughput")["identical"] is True


def test_envd_version_gated_features(scenario: dict[str, Any], gateway_stack: Any) -> None:
    """File metadata on write (envd 0.6.2) and watch events with entries (0.6.3): the SDK
    refuses both when the gateway advertises an older envd."""
    gated = _step(scenario, "version_gated")
    assert gated["envd_version"] == "0.6.3"
    assert gated["written_metadata"] == {"owner": "acceptance"}
    assert gated["read_metadata"] == {"owner": "acceptance"}
    deep = f"{gateway_stack.workdir}/acceptance-watched/sub/deep.txt"
    assert gated["watch_entries"].get("sub/deep.txt") == deep, gated


def test_signed_file_urls_work_through_the_single_gateway_url(
    scenario: dict[str, Any], gateway_stack: Any
) -> None:
    """The URLs point at E2B_SANDBOX_URL and carry no sandbox header: the signature finds it."""
    signed = _step(scenario, "signed_urls")
    assert signed["upload_status"] == 200, signed
    assert signed["download_status"] == 200, signed
    assert signed["downloaded"] == "through a signed url\n"
    assert signed["read_by_sdk"] == "through a signed url\n"
    assert signed["forged_status"] == 401, signed
    assert (gateway_stack.workdir / "acceptance-signed.txt").read_text() == "through a signed url\n"


def test_a_pause_on_timeout_sandbox_is_paused_at_its_end(scenario: dict[str, Any]) -> None:
    """The documented install's controller (its flags, see conftest) pauses it: well inside
    the 30 s after which the gateway's own backstop would step in."""
    paused = _step(scenario, "auto_pause")
    assert paused["states"][0] == "running", paused
    assert paused["states"][-1] == "paused", paused
    assert paused["seconds"] < 20, paused


def test_user_ports_are_public_unless_the_create_says_otherwise(scenario: dict[str, Any]) -> None:
    traffic = _step(scenario, "public_traffic")
    assert traffic == {"public": 200, "private_without_token": 401, "private_with_token": 200}


def test_get_info_and_set_timeout(scenario: dict[str, Any]) -> None:
    sandbox_id = _step(scenario, "create")["sandbox_id"]
    info = _step(scenario, "get_info")
    assert info["sandbox_id"] == sandbox_id
    assert info["template_id"] == "base"
    assert info["metadata"] == {"suite": scenario["steps"]["suite"], "owner": "acceptance"}
    assert info["state"] == "running"
    assert 60 < info["seconds_left"] <= 121, info
    assert _step(scenario, "set_timeout") is None
    after = _step(scenario, "after_set_timeout")
    # set_timeout overwrites the TTL from now (it may shorten it). Reads come from the
    # gateway's watch caches: the new end may take a moment to show (first_read_stale).
    assert 30 < after["seconds_left"] <= 61, after
    if after["first_read_stale"]:
        logging.getLogger(__name__).warning(
            "get_info right after set_timeout was stale for %.2f s", after["settled_after_seconds"]
        )


def test_is_running_list_and_kill(scenario: dict[str, Any]) -> None:
    sandbox_id = _step(scenario, "create")["sandbox_id"]
    assert _step(scenario, "is_running") is True
    listed = _step(scenario, "list")
    assert listed["matching"] == [sandbox_id]
    assert listed["other_metadata"] == []
    assert _step(scenario, "kill") is True
    assert _step(scenario, "kill_again") is False
    assert _step(scenario, "is_running_after_kill") is False
    assert _step(scenario, "list_after_kill") == []
    gone = _step(scenario, "get_info_after_kill")
    assert str(gone["raised"]).endswith("NotFoundException"), gone


def test_run_code(scenario: dict[str, Any]) -> None:
    created = _step(scenario, "ci_create")
    assert SANDBOX_ID.match(created["sandbox_id"]), created
    assert _step(scenario, "ci_value") == "42"
    assert _step(scenario, "ci_state") == "43"  # one kernel: state survives between calls
    assert _step(scenario, "ci_stdout") == ["out\n"]
    error = _step(scenario, "ci_error")
    assert error is not None
    assert error["name"] == "ZeroDivisionError"
    assert _step(scenario, "ci_kill") is True


def test_run_code_matplotlib_gives_a_png_and_chart(scenario: dict[str, Any]) -> None:
    chart = _step(scenario, "ci_chart")
    assert chart["results"] == 1
    assert chart["is_main_result"] is False  # plt.show() displays, as in Jupyter
    assert {"text", "png", "chart"} <= set(chart["formats"])
    assert chart["png_signature"] == "89504e470d0a1a0a"
    assert chart["png_bytes"] > 2000
    assert chart["chart_class"] == "BarChart"
    assert chart["chart_type"] == "bar"
    assert (chart["title"], chart["x_label"], chart["y_label"]) == ("Sales", "Author", "Books")
    assert chart["bars"] == [["A", "Sold", 1.0], ["B", "Sold", 3.0], ["C", "Sold", 2.0]]


def test_run_code_in_r(scenario: dict[str, Any]) -> None:
    r = _step(scenario, "ci_r")
    assert r["first_error"] is None, r
    assert r["first"] == "[1] 2", r
    assert r["second"] == "[1] 6", r  # `x` survived: one R session per context
    assert "".join(r["second_stdout"]) == "r says 42 \n", r
    assert r["failure"]["name"] == "ERROR", r
    assert r["failure"]["value"] == "Error in f(): boom\n", r
    assert "1. f()" in r["failure"]["tb"], r
    assert r["plot_png"] == "89504e470d0a1a0a", r


def test_timings_were_measured(scenario: dict[str, Any]) -> None:
    timings = scenario["timings"]
    for key in (
        "create_seconds",
        "connect_seconds",
        "command_round_trip_median_seconds",
        "file_write_mib_per_second",
        "file_read_mib_per_second",
        "ci_create_seconds",
        "ci_run_code_seconds",
    ):
        assert timings.get(key, 0) > 0, key
