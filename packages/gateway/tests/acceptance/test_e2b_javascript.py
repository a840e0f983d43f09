"""Acceptance: the E2B JavaScript/TypeScript SDK, unmodified, against the gateway (issue 21).

``e2b_js_client.mjs`` runs on Node with the npm packages ``e2b`` and ``@e2b/code-interpreter``,
in two releases pinned below (the newest and an older minor of each), installed once into
``~/.cache/agent-sandbox/e2b-js-clients/`` (a missing Node, npm or registry skips locally and
fails under ``CI=true``). The SDK is configured as
``docs/guides/gateway.md`` tells users, once per form: ``E2B_API_URL`` and ``E2B_SANDBOX_URL``
pointing at the gateway, or ``E2B_DOMAIN`` alone against the stack's HTTPS gateway with
``--domain`` (its offline stand-ins for DNS and a public CA as in ``test_e2b_hostnames.py``);
and ``E2B_API_KEY`` from ``agent-sandbox-gateway keys create``. It does
what a JS user's code does: create from the warm templates, commands (foreground, failing,
streaming, background and kill), files, a directory watch, signed URLs fetched without the SDK,
``getHost(port)`` to a server started in the sandbox, info, timeout, list, pause and connect
(resume), kill; then ``runCode`` of the code interpreter in Python (value, streamed stdout, an
error, a matplotlib chart) and in a JavaScript context.

Set ``GATEWAY_ACCEPTANCE_RESULTS=<dir>`` to keep the run's JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.testing.npm import CACHE, npm_package
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.scripts import load_script

sys.path.insert(0, str(Path(__file__).parent))
import e2b_scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

#: ``(e2b, @e2b/code-interpreter)``: the newest releases, and an older minor of each (2.7.2 is
#: the newest code interpreter that accepts e2b 2.45; 2.8 needs e2b >= 2.48).
RELEASES = (("2.51.0", "2.8.0"), ("2.45.0", "2.7.2"))
CLIENTS_CACHE = CACHE / "e2b-js-clients"
SCRIPT = Path(__file__).with_name("e2b_js_client.mjs")
PROXY_PRELOAD = Path(__file__).with_name("e2b_js_proxy.mjs")
SURFACE = Path(__file__).with_name("e2b_js_surface.mjs")
SANDBOX_ID = re.compile(r"^[a-z0-9]{20}$")


def js_client_dir(e2b: str, code_interpreter: str) -> Path:
    """A folder with the pinned SDK packages in ``node_modules`` (npm, on first use)."""
    root = CLIENTS_CACHE / f"e2b-{e2b}-code-interpreter-{code_interpreter}"
    return npm_package(
        root, "@e2b/code-interpreter", code_interpreter, module=True, also={"e2b": e2b}
    )


CONFIGS = ("sandbox-url", "domain")
RUNS = [
    pytest.param((e2b, ci, config), id=f"e2b-{e2b}-{config}")
    for e2b, ci in RELEASES
    for config in CONFIGS
]


@pytest.fixture(scope="module", params=RUNS)
def report(request: pytest.FixtureRequest, gateway_stack: Any) -> dict[str, Any]:
    """Run the script once per SDK release and client configuration; its parsed JSON report.

    ``sandbox-url``: ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` at the plain gateway (header
    routing). ``domain``: ``E2B_DOMAIN`` only, against the stack's HTTPS gateway with
    ``--domain`` (``hostname_gateway`` of conftest.py), with its offline stand-ins: the test CA as
    ``NODE_EXTRA_CA_CERTS`` and the wildcard tunnel as ``HTTPS_PROXY``, which the script gives
    the SDK as its ``proxy`` option (the SDK's own clients ignore the variable) and Node's global
    ``fetch`` follows once ``e2b_js_proxy.mjs`` is preloaded.
    """
    e2b, code_interpreter, config = request.param
    client_dir = js_client_dir(e2b, code_interpreter)
    # each run's files start from nothing
    workdir = gateway_stack.workdir / f"js-{e2b}-{config}"
    workdir.mkdir()
    for name in (SCRIPT.name, PROXY_PRELOAD.name):
        # node resolves the packages from the script's folder
        shutil.copyfile(SCRIPT.with_name(name), client_dir / name)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "E2B_API_KEY": gateway_stack.api_key,
        "SCENARIO_WORKDIR": str(workdir),
        "SCENARIO_HTTP_PORT": str(free_port()),
        "SCENARIO_CHART_CODE": e2b_scenario.CHART_CODE,
    }
    argv = ["node", str(client_dir / SCRIPT.name)]
    tunnel = hostnames = None
    if config == "sandbox-url":
        # The client configuration of docs/guides/gateway.md, nothing else.
        env |= {"E2B_API_URL": gateway_stack.url, "E2B_SANDBOX_URL": gateway_stack.url}
    else:
        hostnames = request.getfixturevalue("hostname_gateway")
        tunnel = hostnames.tunnel
        env |= {
            "E2B_DOMAIN": hostnames.domain,
            "NODE_EXTRA_CA_CERTS": str(hostnames.ca_file),
            "HTTPS_PROXY": tunnel.url,
            "NO_PROXY": "",
        }
        argv[1:1] = ["--import", (client_dir / PROXY_PRELOAD.name).as_uri()]
    before = len(tunnel.connects) if tunnel else 0
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, f"{done.stderr}\n{gateway_stack.logs()}"
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    target = os.environ.get("GATEWAY_ACCEPTANCE_RESULTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / f"e2b-js-{e2b}-{config}.json").write_text(json.dumps(seen, indent=2) + "\n")
    seen["config"] = config
    seen["expected"] = {"e2b": e2b, "codeInterpreter": code_interpreter}
    seen["domain"] = hostnames.domain if hostnames else None
    seen["workdir"] = workdir
    seen["connects"] = sorted(set(tunnel.connects[before:])) if tunnel else None
    seen["refused"] = tunnel.refused if tunnel else None
    seen["gateway_log"] = gateway_stack.logs()
    return seen


def _step(report: dict[str, Any], name: str) -> Any:
    value = report["steps"].get(name)
    assert not (isinstance(value, dict) and "error" in value), (
        f"step {name} failed: {value['error']}\n{value.get('stack', '')}\n{report['gateway_log']}"
    )
    return value


def test_the_pinned_sdk_releases_ran(report: dict[str, Any]) -> None:
    versions = report["versions"]
    assert {name: versions[name] for name in report["expected"]} == report["expected"]


def test_create_and_commands(report: dict[str, Any]) -> None:
    assert _step(report, "unknownKey")["raised"] == "AuthenticationError"
    assert SANDBOX_ID.match(_step(report, "create")["sandboxId"])
    assert _step(report, "echo") == {"stdout": "hi\n", "stderr": "err\n", "exitCode": 0}
    assert _step(report, "envVar") == "from-create\n"
    failed = _step(report, "exitCode")
    assert failed["raised"] == "CommandExitError", failed
    assert failed["isCommandExitError"] is True
    assert failed["exitCode"] == 3
    assert failed["stderr"] == "oops\n"
    streamed = _step(report, "streaming")
    assert streamed["stdout"] == "line1\nline2\nline3\n"
    assert "".join(streamed["chunks"]) == streamed["stdout"]
    assert len(streamed["chunks"]) >= 2, streamed  # delivered while running, not at the end


def test_a_background_command_is_killed(report: dict[str, Any]) -> None:
    background = _step(report, "background")
    assert background["started"] is True, background
    assert background["running"] is True, background
    assert background["killed"] is True, background
    # wait() on a killed process rejects (signal: killed, exit code -1 as envd reports it).
    assert background["waited"]["raised"] == "CommandExitError", background
    assert background["gone"] is True, background


def test_stdin_and_reconnecting_to_a_running_command(report: dict[str, Any]) -> None:
    assert _step(report, "stdin") == {"stdout": "hello stdin\n", "exitCode": 0}
    reconnected = _step(report, "reconnect")
    assert (reconnected["stdout"], reconnected["exitCode"]) == ("done\n", 0), reconnected
    assert reconnected["chunks"] == ["done\n"], reconnected


def test_binary_files_and_several_files_in_one_write(report: dict[str, Any]) -> None:
    written = _step(report, "binaryAndMany")
    assert written["identical"] is True
    workdir = report["workdir"]
    assert written["many"] == [f"{workdir}/js-many/one.txt", f"{workdir}/js-many/two.txt"]
    assert written["read"] == ["1", "2"]


def test_files(report: dict[str, Any]) -> None:
    files = _step(report, "files")
    workdir = report["workdir"]
    assert files["writtenPath"] == f"{workdir}/js-a.txt"
    assert files["writtenName"] == "js-a.txt"
    assert files["read"] == "hello from js\n"
    assert files["listed"] is True
    assert files["exists"] is True
    assert files["renamedPath"] == f"{workdir}/js-b.txt"
    assert files["existsAfterRename"] is False
    assert files["readRenamed"] == "hello from js\n"
    assert files["existsAfterRemove"] is False
    assert (files["madeDir"], files["madeAgain"]) == (True, False)
    assert files["dirType"] == "dir"
    assert files["missingRead"]["raised"] == "FileNotFoundError", files
    assert (workdir / "js-dir" / "sub").is_dir()


def test_watch_dir_sees_a_new_file(report: dict[str, Any]) -> None:
    events = _step(report, "watchDir")["events"]
    assert {"name": "new.txt", "type": "create"} in events, events


def test_signed_urls_work_without_the_sdk(report: dict[str, Any]) -> None:
    signed = _step(report, "signedUrls")
    assert (signed["uploadStatus"], signed["downloadStatus"]) == (200, 200), signed
    assert signed["downloaded"] == signed["readBySdk"] == "through a signed url from js\n"
    assert signed["forgedStatus"] == 401, signed
    assert (report["workdir"] / "js-signed.txt").read_text() == "through a signed url from js\n"


def test_get_host_reaches_a_server_started_in_the_sandbox(report: dict[str, Any]) -> None:
    sid = _step(report, "create")["sandboxId"]
    served = _step(report, "getHost")
    port = served["host"].split("-", 1)[0]
    assert served["host"].startswith(f"{port}-{sid}."), served
    assert (served["status"], served["body"]) == (200, "served from the sandbox\n"), served
    if report["config"] == "sandbox-url":
        # getHost names E2B's default domain here (a browser needs the domain form); the
        # gateway's address stands in for its DNS, and the Host header decides the route.
        assert served["byHeaders"] == [200, "served from the sandbox\n"], served
    else:
        assert served["host"] == f"{port}-{sid}.{report['domain']}", served


def test_the_domain_form_used_only_names_under_the_domain(report: dict[str, Any]) -> None:
    sid = _step(report, "create")["sandboxId"]
    if report["config"] == "sandbox-url":
        # No domain in the create response (no --domain): host names fall back to E2B's own.
        assert report["steps"]["domain"] == {
            "sandboxDomain": "e2b.app",
            "envdHost": f"49983-{sid}.e2b.app",
        }
        return
    ci_sid = _step(report, "ciCreate")["sandboxId"]
    domain = report["domain"]
    assert report["steps"]["domain"] == {
        "sandboxDomain": domain,
        "envdHost": f"49983-{sid}.{domain}",
    }
    port = _step(report, "getHost")["host"].split("-", 1)[0]
    connects = set(report["connects"])
    needed = {
        f"api.{domain}:443",
        f"49983-{sid}.{domain}:443",
        f"{port}-{sid}.{domain}:443",  # getHost(port), opened with fetch
        f"49999-{ci_sid}.{domain}:443",
    }
    assert needed <= connects <= needed | {f"49983-{ci_sid}.{domain}:443"}, connects
    assert report["refused"] == []


def test_info_timeout_list(report: dict[str, Any]) -> None:
    sid = _step(report, "create")["sandboxId"]
    info = _step(report, "getInfo")
    assert info["sandboxId"] == sid
    assert info["templateId"] == "base"
    assert info["metadata"] == {"suite": report["steps"]["suite"], "owner": "acceptance-js"}
    assert info["state"] == "running"
    assert 60 < info["secondsLeft"] <= 121, info
    assert 30 < _step(report, "setTimeout")["secondsLeft"] <= 61
    assert _step(report, "isRunning") is True
    assert _step(report, "list") == [sid]


def test_pause_then_connect_resumes(report: dict[str, Any]) -> None:
    sid = _step(report, "create")["sandboxId"]
    assert _step(report, "pause") == {"paused": True, "state": "paused"}
    resumed = _step(report, "connect")
    assert resumed == {"sandboxId": sid, "state": "running", "stdout": "kept\n"}, resumed


def test_kill(report: dict[str, Any]) -> None:
    assert _step(report, "kill") is True
    assert _step(report, "killAgain") is False
    assert _step(report, "listAfterKill") == []
    assert _step(report, "getInfoAfterKill")["raised"] == "SandboxNotFoundError"


def test_run_code_python(report: dict[str, Any]) -> None:
    assert SANDBOX_ID.match(_step(report, "ciCreate")["sandboxId"])
    assert _step(report, "ciValue") == "42"
    assert _step(report, "ciState") == "43"
    streamed = _step(report, "ciStdout")
    assert streamed["logs"] == ["one\n", "two\n"], streamed
    assert streamed["chunks"] == ["one\n", "two\n"], streamed
    error = _step(report, "ciError")
    assert error["name"] == "ZeroDivisionError", error
    assert error["value"] == "division by zero"
    assert error["traceback"] is True
    assert _step(report, "ciKill") is True


def test_run_code_in_a_javascript_context(report: dict[str, Any]) -> None:
    js = _step(report, "ciJs")
    assert js["language"] == "javascript", js  # the server's name for it, as E2B's says
    assert js["first"] == "30", js
    assert js["second"] == "2,4,6", js  # `items` survived: one context, one session
    assert js["secondStdout"] == ["js says hi\n"], js
    assert js["missing"]["name"] == "ReferenceError", js


def test_run_code_bash(report: dict[str, Any]) -> None:
    assert _step(report, "ciBash") == {"stdout": ["42\n"], "errorName": None}


def test_run_code_matplotlib_chart(report: dict[str, Any]) -> None:
    chart = _step(report, "ciChart")
    assert chart["results"] == 1, chart
    # The JS Result's formats() lists neither text nor chart (unlike Python's).
    assert chart["formats"] == ["png"], chart
    assert chart["text"].startswith("<Figure size"), chart
    assert chart["pngSignature"] == "89504e470d0a1a0a"
    assert chart["pngBytes"] > 2000
    assert chart["chartType"] == "bar"
    assert (chart["title"], chart["xLabel"], chart["yLabel"]) == ("Sales", "Author", "Books")
    assert chart["bars"] == [["A", "Sold", 1.0], ["B", "Sold", 3.0], ["C", "Sold", 2.0]]


@pytest.mark.parametrize(("e2b", "code_interpreter"), RELEASES, ids=[r[0] for r in RELEASES])
def test_the_compatibility_table_lists_every_js_method(e2b: str, code_interpreter: str) -> None:
    """docs/guides/gateway.md's table must not rot: every public name of the SDK is mapped
    (and, for the newest release, every mapped JavaScript name exists)."""
    client_dir = js_client_dir(e2b, code_interpreter)
    shutil.copyfile(SURFACE, client_dir / SURFACE.name)
    done = subprocess.run(
        ["node", str(client_dir / SURFACE.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    module = load_script("e2b_compatibility")
    surface = {
        group: {module.snake(name) for name in names}
        for group, names in json.loads(done.stdout).items()
    }
    problems = module.differences(module.load(), "js", surface)
    if (e2b, code_interpreter) != RELEASES[0]:
        # An older release may lack newer methods; it must not have unlisted ones.
        problems = [p for p in problems if p.endswith("not in the mapping")]
    assert problems == [], "\n".join(problems)
