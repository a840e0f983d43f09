"""The E2B control plane against a real kube-apiserver (kwok), driven by the real ``e2b`` SDK.

The gateway runs in-process with the Sandbox and extension controllers; a warm pool ``base``
serves creates. Covered: create from the warm pool (timed), get_info, set_timeout (the
claim's shutdownTime moves), list with a metadata filter and paging, connect (timed),
pause and resume through connect, kill; a wrong key is refused and another tenant's key
cannot see or touch the sandbox. Latencies are printed to the log (``-s``/``-rP``).
"""

from __future__ import annotations

import logging
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from e2b import Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException
from gateway_stack import GatewayStack

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.gateway import (
    kwok_template_spec,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    condition_status,
    wait_for_condition,
    wait_for_deletion,
    wait_for_object,
)

logger = logging.getLogger(__name__)
POOL_SIZE = 3


def _pool_objects(namespace: str, name: str, replicas: int) -> list[dict[str, Any]]:
    return warm_template(
        name,
        template_spec=kwok_template_spec("e2b-base:test"),
        replicas=replicas,
        namespace=namespace,
    )


def _claim_ref(namespace: str, sandbox_id: str) -> ObjectRef:
    return ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, sandbox_id, namespace)


def _add_key(cluster: ClusterAccess, tenant: str, gateway_namespace: str) -> str:
    """A key granting ``tenant``, stored in the gateway's namespace."""
    key = tenants.generate_key()
    cluster.apply(tenants.key_secret(tenant, key, gateway_namespace=gateway_namespace))
    return key


def _wait_pool_ready(cluster: ClusterAccess, namespace: str, replicas: int) -> None:
    wait_warm_pool_ready(
        cluster,
        "base",
        namespace=namespace,
        replicas=replicas,
        what=f"{replicas} ready warm sandboxes",
    )


@pytest.fixture
def sdk_env(monkeypatch: pytest.MonkeyPatch, gateway_stack: GatewayStack) -> str:
    """Point the SDK at the gateway (both planes on one URL)."""
    monkeypatch.setenv("E2B_API_URL", gateway_stack.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", gateway_stack.url)
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    return gateway_stack.url


def test_sdk_control_plane_lifecycle(
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    gateway_stack: GatewayStack,
    sdk_env: str,
) -> None:
    cluster.apply(_pool_objects(namespace, "base", POOL_SIZE))
    key = _add_key(cluster, namespace, namespace)
    other_key = _add_key(cluster, other_namespace, namespace)
    _wait_pool_ready(cluster, namespace, POOL_SIZE)
    # the gateway's Secret cache sees the keys through its watch
    deadline = time.monotonic() + 30
    while gateway_stack.state.tenants.authenticate(other_key) is None:
        assert time.monotonic() < deadline, "the gateway never saw the API keys"
        time.sleep(0.1)

    # -- create from the warm pool -------------------------------------------------------
    create_times: list[float] = []
    sandboxes: list[Sandbox] = []
    for i in range(POOL_SIZE):
        started = time.perf_counter()
        sbx = Sandbox.create(
            "base",
            timeout=120,
            metadata={"suite": "gwctl", "n": str(i)},
            envs={"HELLO": "world"},
            api_key=key,
        )
        create_times.append(time.perf_counter() - started)
        sandboxes.append(sbx)
    sbx = sandboxes[0]
    claim = wait_for_condition(cluster.api_client(), _claim_ref(namespace, sbx.sandbox_id), "Ready")
    sandbox_name = claim["status"]["sandbox"]["name"]
    assert sandbox_name != sbx.sandbox_id  # adopted from the warm pool
    adopted = wait_for_object(
        cluster.api_client(),
        ObjectRef(c.SANDBOX_API_VERSION, c.KIND_SANDBOX, sandbox_name, namespace),
        lambda o: True,
        timeout=10,
    )
    assert adopted["metadata"]["labels"][c.LABEL_LAUNCH_TYPE] == c.LAUNCH_TYPE_WARM
    assert "env" not in claim["spec"]
    # the (one, shared) local daemon got the first sandbox's token and env vars by /init;
    # the later /inits are refused by it (a token is set), as separate pods would not be
    daemon_state = gateway_stack.sandboxd.server.config.app.state.daemon.state
    assert daemon_state.env_vars.get("HELLO") == "world"
    assert daemon_state.access_token == sbx._envd_access_token

    # -- get_info ------------------------------------------------------------------------
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base"
    assert info.metadata == {"suite": "gwctl", "n": "0"}
    assert info.state.value == "running"
    remaining = (info.end_at - datetime.now(UTC)).total_seconds()
    assert 60 < remaining <= 125

    # -- set_timeout moves the claim's shutdownTime ---------------------------------------
    sbx.set_timeout(600)
    updated = wait_for_object(
        cluster.api_client(),
        _claim_ref(namespace, sbx.sandbox_id),
        lambda o: (
            (
                datetime.fromisoformat(
                    o["spec"]["lifecycle"]["shutdownTime"].replace("Z", "+00:00")
                )
                - datetime.now(UTC)
            ).total_seconds()
            > 500
        ),
        timeout=10,
        what="shutdownTime moved",
    )
    assert updated["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
    later = Sandbox.get_info(sbx.sandbox_id, api_key=key)
    assert (later.end_at - datetime.now(UTC)).total_seconds() > 500

    # -- list: metadata filter and paging --------------------------------------------------
    ids = {s.sandbox_id for s in sandboxes}
    paginator = Sandbox.list(query=SandboxQuery(metadata={"suite": "gwctl"}), limit=2, api_key=key)
    seen: list[str] = []
    pages = 0
    while paginator.has_next:
        items = paginator.next_items()
        pages += 1
        assert len(items) <= 2
        seen.extend(item.sandbox_id for item in items)
    assert sorted(seen) == sorted(ids)
    assert pages == 2
    only_one = Sandbox.list(query=SandboxQuery(metadata={"n": "1"}), api_key=key).next_items()
    assert [item.sandbox_id for item in only_one] == [sandboxes[1].sandbox_id]
    assert (
        Sandbox.list(query=SandboxQuery(metadata={"suite": "nope"}), api_key=key).next_items() == []
    )

    # -- connect to a running sandbox ------------------------------------------------------
    connect_times: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        again = Sandbox.connect(sbx.sandbox_id, api_key=key)
        connect_times.append(time.perf_counter() - started)
        assert again.sandbox_id == sbx.sandbox_id

    # -- authentication and tenant isolation ----------------------------------------------
    with pytest.raises(AuthenticationException):
        Sandbox.get_info(sbx.sandbox_id, api_key="e2b_" + "0" * 40)
    with pytest.raises(AuthenticationException):
        Sandbox.create("base", api_key="e2b_" + "1" * 40)
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id, api_key=other_key)
    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id, api_key=other_key)
    with pytest.raises(NotFoundException):
        Sandbox.set_timeout(sbx.sandbox_id, 5, api_key=other_key)
    assert Sandbox.kill(sbx.sandbox_id, api_key=other_key) is False
    assert Sandbox.list(api_key=other_key).next_items() == []
    assert Sandbox.get_info(sbx.sandbox_id, api_key=key).sandbox_id == sbx.sandbox_id
    with pytest.raises(SandboxException, match="not found"):
        Sandbox.create("no-such-template", api_key=key)

    # -- kill ------------------------------------------------------------------------------
    for s in sandboxes:
        assert s.kill() is True
    for s in sandboxes:
        wait_for_deletion(cluster.api_client(), _claim_ref(namespace, s.sandbox_id), timeout=60)
    assert Sandbox.kill(sbx.sandbox_id, api_key=key) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id, api_key=key)

    logger.warning(
        "gateway latency: create (warm) median %.1f ms max %.1f ms over %d; "
        "connect (running) median %.1f ms max %.1f ms over %d",
        statistics.median(create_times) * 1000,
        max(create_times) * 1000,
        len(create_times),
        statistics.median(connect_times) * 1000,
        max(connect_times) * 1000,
        len(connect_times),
    )


def test_sdk_pause_and_resume_through_connect(
    cluster: ClusterAccess,
    namespace: str,
    gateway_stack: GatewayStack,
    sdk_env: str,
) -> None:
    cluster.apply(_pool_objects(namespace, "base", 1))
    key = _add_key(cluster, namespace, namespace)
    _wait_pool_ready(cluster, namespace, 1)
    deadline = time.monotonic() + 30
    while gateway_stack.state.tenants.authenticate(key) is None:
        assert time.monotonic() < deadline, "the gateway never saw the API key"
        time.sleep(0.1)
    sbx = Sandbox.create("base", timeout=300, envs={"GREETING": "hello"}, api_key=key)
    claim = wait_for_condition(cluster.api_client(), _claim_ref(namespace, sbx.sandbox_id), "Ready")
    # end to end through the data plane to the local daemon: /init gave it the token and env
    assert sbx.is_running()
    assert sbx.commands.run("echo $GREETING").stdout.strip() == "hello"
    (metric,) = sbx.get_metrics()
    assert metric.cpu_count >= 1
    assert metric.mem_total > 0
    sandbox_ref = ObjectRef(
        c.SANDBOX_API_VERSION, c.KIND_SANDBOX, claim["status"]["sandbox"]["name"], namespace
    )

    assert sbx.pause() is True
    wait_for_condition(cluster.api_client(), sandbox_ref, c.CONDITION_SUSPENDED, timeout=60)
    paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED]), api_key=key).next_items()
    assert [p.sandbox_id for p in paused] == [sbx.sandbox_id]
    assert Sandbox.get_info(sbx.sandbox_id, api_key=key).state.value == "paused"
    # pausing twice: the API answers 409, which the SDK reports as False
    assert Sandbox.pause(sbx.sandbox_id, api_key=key) is False

    # the resumed pod's daemon starts blank (here: the shared local one is reset)
    daemon_state = gateway_stack.sandboxd.server.config.app.state.daemon.state
    daemon_state.env_vars.clear()
    daemon_state.access_token = None
    started = time.perf_counter()
    resumed = Sandbox.connect(sbx.sandbox_id, timeout=120, api_key=key)
    resume_seconds = time.perf_counter() - started
    assert resumed.sandbox_id == sbx.sandbox_id
    sandbox = wait_for_condition(cluster.api_client(), sandbox_ref, c.CONDITION_READY, timeout=60)
    assert condition_status(sandbox, c.CONDITION_SUSPENDED) != "True"
    assert sandbox["spec"].get("operatingMode", "Running") == "Running"
    assert Sandbox.get_info(sbx.sandbox_id, api_key=key).state.value == "running"
    # the resumed pod was re-initialised: the same token and the kept environment
    assert daemon_state.access_token == sbx._envd_access_token
    assert resumed.commands.run("echo $GREETING").stdout.strip() == "hello"
    logger.warning("gateway latency: resume through connect %.1f ms (kwok)", resume_seconds * 1000)
    assert resumed.kill() is True


def test_sdk_cold_template_idempotency_and_kept_env(
    cluster: ClusterAccess,
    namespace: str,
    gateway_stack: GatewayStack,
    sdk_env: str,
) -> None:
    # a template without a pool: the gateway adds a zero-replica shadow pool (cold start)
    template, _pool = _pool_objects(namespace, "cold", 0)
    cluster.apply([template])
    key = _add_key(cluster, namespace, namespace)
    deadline = time.monotonic() + 30
    while gateway_stack.state.tenants.authenticate(key) is None:
        assert time.monotonic() < deadline, "the gateway never saw the API key"
        time.sleep(0.1)
    started = time.perf_counter()
    sbx = Sandbox.create(
        "cold", envs={"SECRET_TOKEN": "abc"}, idempotency_key="cold-create-1", api_key=key
    )
    cold_seconds = time.perf_counter() - started
    again = Sandbox.create(
        "cold", envs={"SECRET_TOKEN": "abc"}, idempotency_key="cold-create-1", api_key=key
    )
    assert again.sandbox_id == sbx.sandbox_id
    pool = wait_for_object(
        cluster.api_client(),
        ObjectRef(
            c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_WARM_POOL, "shadow-pool-cold", namespace
        ),
        lambda o: True,
        timeout=10,
    )
    assert pool["spec"]["replicas"] == 0
    claim = wait_for_condition(cluster.api_client(), _claim_ref(namespace, sbx.sandbox_id), "Ready")
    assert claim["spec"]["warmPoolRef"]["name"] == "shadow-pool-cold"
    assert claim["status"]["sandbox"]["name"] == sbx.sandbox_id  # cold: named like the claim
    assert "env" not in claim["spec"]
    secret = wait_for_object(
        cluster.api_client(),
        ObjectRef("v1", "Secret", f"{sbx.sandbox_id}-env", namespace),
        lambda o: True,
        timeout=10,
    )
    assert secret["metadata"]["ownerReferences"][0]["uid"] == claim["metadata"]["uid"]
    assert "abc" not in str(claim)
    info = Sandbox.get_info(sbx.sandbox_id, api_key=key)
    assert info.template_id == "cold"
    logger.warning("gateway latency: create (cold, kwok) %.1f ms", cold_seconds * 1000)
    assert sbx.kill() is True
    # the Secret goes with the claim (garbage collection by owner reference)
    wait_for_deletion(cluster.api_client(), _claim_ref(namespace, sbx.sandbox_id), timeout=60)
