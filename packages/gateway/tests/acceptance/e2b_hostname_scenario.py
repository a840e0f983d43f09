"""The hostname scenario: an unmodified E2B client that knows only a domain, over HTTPS.

Like ``e2b_scenario.py`` this program imports nothing of this project (only ``e2b`` and the
standard library, and ``e2b_code_interpreter`` for its last step), so it runs in any
virtualenv holding a release of the real SDK. It is
configured the way the SDK's durable setup is (``sandbox_url`` is deprecated): ``E2B_DOMAIN``
and ``E2B_API_KEY`` only, no ``E2B_API_URL``, no ``E2B_SANDBOX_URL``, no ``E2B_DEBUG``. The SDK
therefore calls the control plane at ``https://api.<domain>`` and each sandbox at
``https://<port>-<sandboxID>.<domain>``, verifying certificates with the system trust store
(the test supplies its CA through ``SSL_CERT_FILE`` and its wildcard name resolution through
``HTTPS_PROXY``).

Steps: create, ``commands.run`` (stdout), ``files.write``/``read``, then three raw HTTPS
probes with the standard library that show what decides the route (the SDK itself always
adds ``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers too): a request naming the sandbox by its
host only, one whose headers name an unknown sandbox while its host names this one, and one
whose host names an unknown sandbox; then ``kill``; then ``run_code`` of
``e2b_code_interpreter`` (port 49999, its own host name). It prints ONE JSON object on
stdout: what each step observed (values, not verdicts); exit status 0 means "the JSON was
written".

Optional: ``SCENARIO_WORKDIR`` (``/home/user``), ``SCENARIO_TEMPLATE`` (``base``),
``SCENARIO_CI_TEMPLATE`` (``code-interpreter-v1``), ``SCENARIO_SKIP_CODE_INTERPRETER=1``.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import traceback
import urllib.parse
import uuid
from collections.abc import Callable
from importlib import metadata
from typing import Any

import e2b
from e2b_scenario import signed_urls

WORKDIR = os.environ.get("SCENARIO_WORKDIR", "/home/user").rstrip("/") or "/"
TEMPLATE = os.environ.get("SCENARIO_TEMPLATE", "base")
CI_TEMPLATE = os.environ.get("SCENARIO_CI_TEMPLATE", "code-interpreter-v1")
ENVD_PORT = 49983
UNKNOWN_ID = "zzzzzzzzzzzzzzzzzzzz"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _step(steps: dict[str, Any], name: str, body: Callable[[], Any]) -> Any:
    """Run ``body``; store its JSON-able result, or its error, under ``name``."""
    try:
        value = body()
    except Exception as err:
        steps[name] = {
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(limit=6),
        }
        return None
    steps[name] = value
    return value


def _probe(host: str, *, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """``GET https://<host>/health`` through ``HTTPS_PROXY``, verified by the default trust."""
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    context = ssl.create_default_context()  # honours SSL_CERT_FILE, as the SDK's stack does
    conn = http.client.HTTPSConnection(
        proxy.hostname or "127.0.0.1", proxy.port or 80, context=context, timeout=30
    )
    conn.set_tunnel(host, 443)
    try:
        conn.request("GET", "/health", headers={"Host": host, **(headers or {})})
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        sock = conn.sock
        return {
            "status": response.status,
            "body": body,
            "tls": sock.version() if isinstance(sock, ssl.SSLSocket) else None,
        }
    finally:
        conn.close()


def run(steps: dict[str, Any]) -> None:
    """Create, run, write/read, probe, kill."""
    suite = uuid.uuid4().hex[:12]
    steps["config"] = {
        "E2B_DOMAIN": os.environ.get("E2B_DOMAIN"),
        "set": sorted(k for k in os.environ if k.startswith("E2B_") and k != "E2B_API_KEY"),
    }
    sandbox = _step(
        steps,
        "create",
        lambda: e2b.Sandbox.create(template=TEMPLATE, timeout=120, metadata={"suite": suite}),
    )
    if sandbox is None:
        return
    sid = sandbox.sandbox_id
    domain = sandbox.sandbox_domain
    steps["create"] = {
        "sandbox_id": sid,
        "sandbox_domain": domain,
        "api_url": sandbox.connection_config.api_url,
        "envd_api_url": sandbox.envd_api_url,
        "host": sandbox.get_host(ENVD_PORT),
    }
    _step(steps, "echo", lambda: sandbox.commands.run("echo hi").stdout)
    path = f"{WORKDIR}/hostname-routing.txt"
    _step(
        steps,
        "files",
        lambda: {
            "written_path": sandbox.files.write(path, "over https by name\n").path,
            "read": sandbox.files.read(path),
        },
    )
    host = f"{ENVD_PORT}-{sid}.{domain}"
    _step(steps, "probe_host_only", lambda: _probe(host))
    _step(
        steps,
        "probe_host_over_headers",
        lambda: _probe(
            host, headers={"E2b-Sandbox-Id": UNKNOWN_ID, "E2b-Sandbox-Port": str(ENVD_PORT)}
        ),
    )
    _step(
        steps,
        "probe_unknown_host",
        lambda: _probe(
            f"{ENVD_PORT}-{UNKNOWN_ID}.{domain}",
            headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(ENVD_PORT)},
        ),
    )
    _step(steps, "signed_urls", lambda: signed_urls(sandbox))
    _step(steps, "is_running", sandbox.is_running)
    _step(steps, "kill", sandbox.kill)
    _step(steps, "is_running_after_kill", sandbox.is_running)
    if os.environ.get("SCENARIO_SKIP_CODE_INTERPRETER") != "1":
        run_code_interpreter(steps)


def run_code_interpreter(steps: dict[str, Any]) -> None:
    """``run_code`` on ``https://49999-<id>.<domain>`` (the code interpreter's own port)."""
    try:
        from e2b_code_interpreter import Sandbox as CodeSandbox
    except ImportError as err:
        steps["ci_create"] = {"error": f"ImportError: {err}"}
        return
    sandbox = _step(steps, "ci_create", lambda: CodeSandbox.create(template=CI_TEMPLATE))
    if sandbox is None:
        return
    steps["ci_create"] = {"sandbox_id": sandbox.sandbox_id, "host": sandbox.get_host(49999)}
    try:
        _step(steps, "ci_value", lambda: sandbox.run_code("x = 6 * 7\nx").text)
    finally:
        _step(steps, "ci_kill", sandbox.kill)


def main() -> int:
    """Run the scenario and print the JSON object; 0 once it is written."""
    steps: dict[str, Any] = {}
    run(steps)
    version = _version("e2b")
    report = {
        "versions": {
            "python": sys.version.split()[0],
            "e2b": version,
            "e2b_code_interpreter": _version("e2b-code-interpreter"),
        },
        "steps": steps,
    }
    sys.stdout.write(json.dumps(report, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
