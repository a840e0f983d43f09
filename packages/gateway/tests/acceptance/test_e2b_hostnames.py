"""Acceptance: the real E2B SDK with only a domain, over HTTPS, routed by host name (issue 14).

Without ``sandbox_url`` (deprecated since e2b 2.63.0) the SDK calls ``https://api.<domain>``
and ``https://<port>-<sandboxID>.<domain>``, the ``domain`` coming from the create response.
A second gateway of the session's stack (``hostname_gateway`` of conftest.py, shared with the
JavaScript SDK's domain case) serves HTTPS itself (``--tls-cert-file``,
``--tls-key-file``) with ``--domain=sandbox.test``; ``e2b_hostname_scenario.py`` (create,
commands, files, kill, and ``run_code`` on port 49999's host name) runs under each SDK release
(the workspace's newest and 2.45.1) with ``E2B_DOMAIN`` and ``E2B_API_KEY`` only. Offline
stand-ins, in the scenario's environment only:

* trust: a throwaway CA that signed a ``*.sandbox.test`` certificate, given as
  ``SSL_CERT_FILE`` (the SDK's reqwest stack reads it with the system trust store; without it
  the handshake fails with ``UnknownIssuer``);
* wildcard DNS: ``HTTPS_PROXY`` pointing at a :class:`WildcardTunnel`, which tunnels
  ``CONNECT *.sandbox.test:443`` to the gateway's TLS port. reqwest resolves names in Rust, so
  wrapping Python's ``socket.getaddrinfo`` cannot redirect it; the tunnel only copies bytes,
  so SNI, the certificate check and the ``Host`` header stay end to end.

The tunnel's record of CONNECT targets shows the names the SDK used; the raw probes show that
the gateway routes by the Host, not by the ``E2b-Sandbox-Id`` header the SDK also sends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SCENARIO = Path(__file__).with_name("e2b_hostname_scenario.py")
DOMAIN = "sandbox.test"
SANDBOX_ID = re.compile(r"^[a-z0-9]{20}$")


@pytest.fixture(scope="module")
def scenario(
    gateway_stack: Any, hostname_gateway: Any, e2b_python: tuple[str, Path]
) -> dict[str, Any]:
    """Run the hostname scenario with one SDK release; its JSON report plus the tunnel log."""
    version, python = e2b_python
    assert hostname_gateway.domain == DOMAIN
    before = len(hostname_gateway.tunnel.connects)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        # The client configuration: a domain and a key, nothing else.
        "E2B_DOMAIN": DOMAIN,
        "E2B_API_KEY": gateway_stack.api_key,
        # The offline stand-ins for a public CA and a wildcard DNS record.
        "SSL_CERT_FILE": str(hostname_gateway.ca_file),
        "HTTPS_PROXY": hostname_gateway.tunnel.url,
        "NO_PROXY": "",
        "SCENARIO_WORKDIR": str(gateway_stack.workdir),
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
    report["connects"] = hostname_gateway.tunnel.connects[before:]
    report["refused"] = hostname_gateway.tunnel.refused
    report["gateway_log"] = gateway_stack.logs()
    return report


def _step(report: dict[str, Any], name: str) -> Any:
    value = report["steps"].get(name)
    assert not (isinstance(value, dict) and "error" in value), (
        f"step {name} failed with e2b {report['versions']['e2b']}: {value['error']}\n"
        f"{value.get('traceback', '')}\n{report['gateway_log']}"
    )
    return value


def test_the_intended_sdk_release_ran_with_only_a_domain(scenario: dict[str, Any]) -> None:
    assert scenario["versions"]["e2b"] == scenario["expected_e2b"]
    assert _step(scenario, "config") == {"E2B_DOMAIN": DOMAIN, "set": ["E2B_DOMAIN"]}


def test_the_sdk_builds_host_names_from_the_create_response(scenario: dict[str, Any]) -> None:
    created = _step(scenario, "create")
    sid = created["sandbox_id"]
    assert SANDBOX_ID.match(sid), created
    assert created["sandbox_domain"] == DOMAIN
    assert created["api_url"] == f"https://api.{DOMAIN}"
    assert created["envd_api_url"] == f"https://49983-{sid}.{DOMAIN}"
    assert created["host"] == f"49983-{sid}.{DOMAIN}"


def test_every_connection_went_to_a_name_under_the_domain(scenario: dict[str, Any]) -> None:
    """The tunnel saw the control plane's and the sandbox's names, on port 443, and nothing
    else: no request of the run could have used a plain gateway URL."""
    sid = _step(scenario, "create")["sandbox_id"]
    ci_sid = _step(scenario, "ci_create")["sandbox_id"]
    connects = set(scenario["connects"])
    assert f"api.{DOMAIN}:443" in connects
    assert f"49983-{sid}.{DOMAIN}:443" in connects
    assert f"49999-{ci_sid}.{DOMAIN}:443" in connects
    assert connects <= {
        f"api.{DOMAIN}:443",
        f"49983-{sid}.{DOMAIN}:443",
        f"49983-zzzzzzzzzzzzzzzzzzzz.{DOMAIN}:443",  # the unknown-host probe
        f"49983-{ci_sid}.{DOMAIN}:443",
        f"49999-{ci_sid}.{DOMAIN}:443",
    }, connects
    assert scenario["refused"] == []


def test_commands_and_files_work_over_hostnames(
    scenario: dict[str, Any], gateway_stack: Any
) -> None:
    assert _step(scenario, "echo") == "hi\n"
    files = _step(scenario, "files")
    assert files["written_path"] == f"{gateway_stack.workdir}/hostname-routing.txt"
    assert files["read"] == "over https by name\n"
    assert (gateway_stack.workdir / "hostname-routing.txt").read_text() == "over https by name\n"


def test_signed_file_urls_work_through_host_names(scenario: dict[str, Any]) -> None:
    signed = _step(scenario, "signed_urls")
    assert (signed["upload_status"], signed["download_status"]) == (200, 200), signed
    assert signed["downloaded"] == signed["read_by_sdk"] == "through a signed url\n"
    assert signed["forged_status"] == 401, signed


def test_the_host_decides_the_route_not_the_headers(scenario: dict[str, Any]) -> None:
    # Host only, no E2b-Sandbox-* headers: envd's open /health of this sandbox.
    host_only = _step(scenario, "probe_host_only")
    assert host_only["status"] == 204, host_only
    assert host_only["tls"] in ("TLSv1.2", "TLSv1.3")
    # Headers naming an unknown sandbox cannot redirect a request addressed to this one...
    assert _step(scenario, "probe_host_over_headers")["status"] == 204
    # ...nor rescue a request whose host names an unknown sandbox.
    unknown = _step(scenario, "probe_unknown_host")
    assert unknown["status"] == 502, unknown
    assert "The sandbox was not found" in unknown["body"]


def test_is_running_and_kill(scenario: dict[str, Any]) -> None:
    assert _step(scenario, "is_running") is True
    assert _step(scenario, "kill") is True
    assert _step(scenario, "is_running_after_kill") is False


def test_run_code_on_the_code_interpreters_host_name(scenario: dict[str, Any]) -> None:
    created = _step(scenario, "ci_create")
    assert created["host"] == f"49999-{created['sandbox_id']}.{DOMAIN}"
    assert _step(scenario, "ci_value") == "42"
    assert _step(scenario, "ci_kill") is True
