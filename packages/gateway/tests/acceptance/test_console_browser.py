"""The web console in a real headless browser (Debian's Chromium) against the local cluster.

Playwright drives ``/usr/bin/chromium`` (never a downloaded browser) at the session's gateway:

* the key prompt refuses a malformed key and a key the gateway does not know;
* a sandbox created through the E2B API appears in the list without a reload (the long poll);
* with the keyboard only, a user filters the list, opens the sandbox, reads its Events and
  log note, suspends it, resumes it, asks for a snapshot (this stack has no snapshot
  controller: the page says what to run) and deletes it; the cluster's objects follow each step;
* the other tenant's key shows none of it, and its API calls get 404 and change nothing;
* 1,000 Sandbox objects in a third tenant's namespace all render; the time to render them and
  to filter them is printed (``CONSOLE_RESULTS=<file>`` keeps it as JSON), never asserted.

``CONSOLE_SCREENSHOTS=<dir>`` writes the documentation's screenshots there
(``nox -s console-screenshots`` writes them into docs/observe/img/).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.gateway import create_key, kwok_template_spec
from kube_agent_sandbox.testing.plugin import namespace_name, unavailable

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without these Chromium waits on connections it never gets.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MANY = 1000
TIMEOUT_MS = 60_000


def _shot(page: Page, name: str) -> None:
    folder = os.environ.get("CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    """A fresh headless Chromium profile."""
    if not CHROMIUM.is_file():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium; scripts/setup.sh)")
    with tempfile.TemporaryDirectory(prefix="console-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


def _sign_in(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/console/")
    key_input = page.get_by_label("API key")
    expect(key_input).to_be_focused()
    page.keyboard.type(key)
    page.keyboard.press("Enter")


def _row(page: Page, sandbox_id: str) -> Any:
    return page.locator(f'#sandboxes tbody tr[data-id="{sandbox_id}"]')


def _create(stack: Any, template: str = "base") -> str:
    response = httpx.post(
        f"{stack.url}/v2/sandboxes",
        json={"templateID": template, "timeout": 600},
        headers={"X-API-KEY": stack.api_key},
        timeout=120,
    )
    assert response.status_code == 201, response.text
    sandbox_id = response.json()["sandboxID"]
    assert isinstance(sandbox_id, str)
    return sandbox_id


def _key(stack: Any) -> dict[str, str]:
    return {"X-API-KEY": stack.api_key}


def _claim(cluster: ClusterAccess, namespace: str, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl(
        "get",
        "sandboxclaims.extensions.agents.x-k8s.io",
        name,
        "-n",
        namespace,
        "-o",
        "json",
        check=False,
    )
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    claim: dict[str, Any] = json.loads(result.stdout)
    return claim


def _bound_sandbox(cluster: ClusterAccess, namespace: str, claim_name: str) -> dict[str, Any]:
    claim = _claim(cluster, namespace, claim_name)
    assert claim is not None
    name = claim["status"]["sandbox"]["name"]
    out = cluster.kubectl("get", "sandboxes.agents.x-k8s.io", name, "-n", namespace, "-o", "json")
    sandbox: dict[str, Any] = json.loads(out.stdout)
    return sandbox


def test_key_prompt_refuses_bad_and_unknown_keys(
    browser: BrowserContext, gateway_stack: Any
) -> None:
    page = browser.new_page()
    page.goto(f"{gateway_stack.url}/console/")
    _shot(page, "console-sign-in")
    page.get_by_label("API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("40 lowercase hexadecimal digits")
    expect(page.get_by_label("API key")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("API key").fill("e2b_" + "0" * 40)
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_have_text("The gateway refused this API key.")
    expect(page.locator("#console")).to_be_hidden()
    # the key is never in a URL, only in this tab's session storage
    assert "e2b_" not in page.url
    page.close()


def test_keyboard_user_sees_and_acts_on_their_sandbox(
    browser: BrowserContext, gateway_stack: Any, cluster: ClusterAccess
) -> None:
    stack = gateway_stack
    page = browser.new_page()
    _sign_in(page, stack.url, stack.api_key)
    expect(page.locator("#who")).to_have_text(f"Namespace {stack.namespace}")
    expect(page.locator("#pools tbody tr")).to_have_count(2)

    loaded = re.compile(rf"^\d+ sandbox(es)? in namespace {stack.namespace}\.$")
    expect(page.get_by_role("status")).to_have_text(loaded)

    # created (and one paused) behind the page's back: they show up by themselves
    sandbox_id = _create(stack)
    paused_id = _create(stack, "code-interpreter-v1")
    response = httpx.post(f"{stack.url}/sandboxes/{paused_id}/pause", headers=_key(stack))
    assert response.status_code == 204, response.text
    expect(_row(page, sandbox_id).locator(".state")).to_have_text("Running")
    expect(_row(page, paused_id).locator(".state")).to_have_text("Suspended")
    expect(_row(page, paused_id)).to_contain_text("gateway")
    _shot(page, "console-list")

    # keyboard only: the filter has the focus after sign-in
    expect(page.get_by_label("Filter by name, state, template or pool")).to_be_focused()
    page.keyboard.type(sandbox_id)
    expect(page.locator("#sandboxes tbody tr:not([hidden])")).to_have_count(1)
    page.keyboard.press("Tab")
    expect(_row(page, sandbox_id).get_by_role("button", name=sandbox_id)).to_be_focused()
    page.keyboard.press("Enter")
    details = page.locator("#details")
    expect(details).to_be_visible()
    expect(page.locator("#details-title")).to_be_focused()
    expect(_row(page, sandbox_id)).to_have_attribute("aria-current", "true")
    expect(page.locator("#d-name")).to_have_text(sandbox_id)
    # Events of the claim, Sandbox and Pod; kwok nodes serve no logs, and the page says so
    expect(page.locator("#events tbody tr").first).to_be_visible()
    expect(page.locator("#log-note")).to_contain_text("Logs unavailable")
    expect(page.get_by_role("button", name="Snapshot")).to_be_enabled()
    expect(page.get_by_role("button", name="Resume")).to_be_disabled()
    _shot(page, "console-details")

    page.keyboard.press("Tab")  # from the heading to the first enabled action
    expect(page.get_by_role("button", name="Suspend")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text(f"Suspended {sandbox_id}.")
    expect(_row(page, sandbox_id).locator(".state")).to_have_text("Suspended")
    assert _bound_sandbox(cluster, stack.namespace, sandbox_id)["spec"]["operatingMode"] == (
        c.OPERATING_MODE_SUSPENDED
    )

    # the focus is back on the heading; Suspend is disabled now, so Tab reaches Resume
    expect(page.locator("#details-title")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Resume")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text(f"Resumed {sandbox_id}.")
    expect(_row(page, sandbox_id).locator(".state")).to_have_text("Running")
    assert _bound_sandbox(cluster, stack.namespace, sandbox_id)["spec"]["operatingMode"] == (
        c.OPERATING_MODE_RUNNING
    )

    # snapshot: this stack runs no snapshot controller (no --snapshot-registry), and the page
    # says what to run; with one, the same answer names the snapshot and its image
    # (tests/integration/test_gateway_snapshots.py takes one through this endpoint)
    expect(page.locator("#details-title")).to_be_focused()
    page.keyboard.press("Tab")  # Suspend
    page.keyboard.press("Tab")  # Resume is disabled: Snapshot
    expect(page.get_by_role("button", name="Snapshot")).to_be_focused()
    page.keyboard.press("Enter")
    status = page.get_by_role("status")
    expect(status).to_have_text(f"Taking a snapshot of {sandbox_id}…")
    # after the gateway's 15 s wait for a controller to take the SandboxSnapshot
    expect(status).to_contain_text(
        f"snapshot {sandbox_id} failed: no snapshot controller took", timeout=TIMEOUT_MS
    )
    expect(status).to_contain_text("--snapshot-registry")
    expect(_row(page, sandbox_id).locator(".state")).to_have_text("Running")

    # the other tenant: nothing to see, nothing to do (404), nothing changed
    claim = _claim(cluster, stack.namespace, sandbox_id)
    assert claim is not None
    other = {"X-API-KEY": stack.other_tenant_key}
    api = f"{stack.url}/console/api/sandboxes/{sandbox_id}"
    assert httpx.get(api, headers=other).status_code == 404
    assert httpx.post(f"{api}/suspend", headers=other).status_code == 404
    assert httpx.post(f"{api}/snapshot", headers=other).status_code == 404
    assert httpx.delete(api, headers=other).status_code == 404
    after = _claim(cluster, stack.namespace, sandbox_id)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
    assert "deletionTimestamp" not in after["metadata"]
    seen = httpx.get(f"{stack.url}/console/api/state", headers=other).json()
    assert sandbox_id not in [r["id"] for r in seen["sandboxes"]]

    # delete, confirmed in the browser's dialog
    page.once("dialog", lambda dialog: dialog.accept())
    expect(page.locator("#details-title")).to_be_focused()
    page.keyboard.press("Tab")  # Suspend
    page.keyboard.press("Tab")  # Resume is disabled: Snapshot
    page.keyboard.press("Tab")  # Delete
    expect(page.get_by_role("button", name="Delete")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text(f"Deleted {sandbox_id}.")
    expect(_row(page, sandbox_id)).to_have_count(0)
    assert _claim(cluster, stack.namespace, sandbox_id) is None or "deletionTimestamp" in (
        (_claim(cluster, stack.namespace, sandbox_id) or {}).get("metadata") or {}
    )

    response = httpx.delete(f"{stack.url}/sandboxes/{paused_id}", headers=_key(stack))
    assert response.status_code == 204, response.text

    # and the other tenant's page shows its own (empty) namespace
    page.get_by_role("button", name="Sign out").click()
    _sign_in(page, stack.url, stack.other_tenant_key)
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#sandboxes tbody tr")).to_have_count(0)
    page.close()


@pytest.fixture(scope="module")
def many_sandboxes(cluster: ClusterAccess, gateway_stack: Any) -> Iterator[tuple[str, str]]:
    """A tenant namespace with :data:`MANY` Sandbox objects, and its key.

    They are created Suspended: the controller reconciles them without starting 1,000 pods
    on a machine the other tests share.
    """
    namespace = namespace_name("console-many")
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    key = create_key(cluster.kubeconfig, namespace, gateway_namespace=gateway_stack.namespace)
    items = [
        {
            "apiVersion": c.SANDBOX_API_VERSION,
            "kind": c.KIND_SANDBOX,
            "metadata": {"name": f"sb-{i:04d}", "namespace": namespace},
            "spec": {
                **kwok_template_spec("console-many:test"),
                "operatingMode": c.OPERATING_MODE_SUSPENDED,
            },
        }
        for i in range(MANY)
    ]
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    cluster.kubectl("create", "-f", "-", "-o", "name", input=document, timeout=600)
    try:
        yield namespace, key
    finally:
        # waited for, so the tests after this one do not share the controller with 1,000 deletes
        cluster.kubectl(
            "delete", "namespace", namespace, "--ignore-not-found", "--timeout=300s", timeout=330
        )


def test_a_thousand_sandboxes_render_and_stay_responsive(
    browser: BrowserContext, gateway_stack: Any, many_sandboxes: tuple[str, str]
) -> None:
    _namespace, key = many_sandboxes
    page = browser.new_page()
    started = time.monotonic()
    _sign_in(page, gateway_stack.url, key)
    expect(page.locator("#sandboxes tbody tr")).to_have_count(MANY, timeout=120_000)
    expect(page.locator("#count")).to_have_text(f"({MANY})")
    to_list = time.monotonic() - started
    stats = page.evaluate("window.consoleStats")

    # responsive: filtering 1,000 rows and moving through them by keyboard
    started = time.monotonic()
    page.get_by_label("Filter by name, state, template or pool").fill("sb-099")
    expect(page.locator("#sandboxes tbody tr:not([hidden])")).to_have_count(10)
    expect(page.locator("#count")).to_have_text(f"(10 of {MANY})")
    to_filter = time.monotonic() - started
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="sb-0999")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(page.get_by_role("button", name="sb-0998")).to_be_focused()
    page.keyboard.press("ArrowUp")
    expect(page.get_by_role("button", name="sb-0999")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#d-name")).to_have_text("sb-0999")
    expect(page.get_by_role("button", name="Delete")).to_be_disabled()
    expect(page.locator("#why-delete")).to_contain_text("Not created through the gateway")
    # a live change among 1,000 rows: resume one (its Suspend is disabled, so Tab reaches Resume)
    renders = page.evaluate("window.consoleStats.renders")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Resume")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text("Resumed sb-0999.")
    expect(_row(page, "sb-0999").locator(".state")).not_to_have_text("Suspended")
    update_ms = page.evaluate("window.consoleStats.lastRenderMs")
    assert page.evaluate("window.consoleStats.renders") > renders
    page.keyboard.press("Escape")
    expect(page.locator("#details")).to_be_hidden()
    expect(page.get_by_role("button", name="sb-0999")).to_be_focused()
    page.get_by_label("Filter by name, state, template or pool").fill("")
    expect(page.locator("#sandboxes tbody tr:not([hidden])")).to_have_count(MANY)

    figures = {
        "sandboxes": MANY,
        "sign_in_to_all_rows_seconds": round(to_list, 3),
        "first_render_ms": round(float(stats["firstRenderMs"]), 1),
        "update_render_ms": round(float(update_ms), 1),
        "filter_seconds": round(to_filter, 3),
    }
    print(f"\nconsole with {MANY} sandboxes: {json.dumps(figures)}")
    results = os.environ.get("CONSOLE_RESULTS")
    if results:
        Path(results).write_text(json.dumps(figures, indent=2) + "\n")
    _shot(page, "console-many")
    page.close()
