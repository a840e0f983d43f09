"""Startup steps of the controller process that need no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import propagate, trace

from kube_agent_sandbox.controller import app
from kube_agent_sandbox.controller import plugins as app_plugins
from kube_agent_sandbox.controller.config import (
    ConfigError,
    ControllerOptions,
    parse_args,
    read_allowed_label_domains,
)
from kube_agent_sandbox.controller.runtime import ApiClient, ClusterConfig, RuntimeMetrics
from kube_agent_sandbox.controller.webhook.certs import generate_certificates, write_serving_files


def test_lease_namespace_from_flag(tmp_path: Path) -> None:
    options = parse_args(["--leader-election-namespace=ns1"])
    assert app.resolve_leader_election_namespace(options, namespace_file="/nonexistent") == "ns1"


def test_lease_namespace_from_service_account(tmp_path: Path) -> None:
    sa = tmp_path / "namespace"
    sa.write_text("agent-sandbox-system\n")
    assert (
        app.resolve_leader_election_namespace(ControllerOptions(), namespace_file=str(sa))
        == "agent-sandbox-system"
    )


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_lease_namespace_outside_a_cluster_fails(tmp_path: Path, content: str | None) -> None:
    sa = tmp_path / "namespace"
    if content is not None:
        sa.write_text(content)
    with pytest.raises(app.StartupError) as caught:
        app.resolve_leader_election_namespace(ControllerOptions(), namespace_file=str(sa))
    assert caught.value.message == "unable to start manager"
    assert "unable to find leader election namespace" in caught.value.fields["error"]


def test_tracing_off_is_a_no_op() -> None:
    """Without --enable-tracing nothing global changes and the shutdown hook does nothing."""
    provider, propagator = trace.get_tracer_provider(), propagate.get_global_textmap()
    shutdown = app.setup_tracing(ControllerOptions())
    assert trace.get_tracer_provider() is provider  # no OTLP provider installed
    assert propagate.get_global_textmap() is propagator
    assert shutdown() is None
    assert shutdown() is None  # safe to call again (shutdown runs on every exit path)
    assert trace.get_tracer_provider() is provider


def test_missing_kubeconfig_is_a_startup_error(tmp_path: Path) -> None:
    options = parse_args(["--kubeconfig", str(tmp_path / "missing")])
    with pytest.raises(app.StartupError, match="unable to get kubeconfig"):
        app.load_cluster_config(options)


def test_allowed_label_domains(tmp_path: Path) -> None:
    path = tmp_path / "allowed-label-domains"
    path.write_text(" Example.COM, foo.io\n\nbar.dev\r\n,, ")
    assert read_allowed_label_domains(path) == ("example.com", "foo.io", "bar.dev")
    assert read_allowed_label_domains(tmp_path / "absent") == ()
    path.write_text("   ")
    assert read_allowed_label_domains(path) == ()


def test_allowed_label_domains_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="failed to read configuration file"):
        read_allowed_label_domains(tmp_path)  # a directory


def _client(options: ControllerOptions) -> ApiClient:
    return app.build_client(
        options, ClusterConfig(host="https://127.0.0.1:1"), metrics=RuntimeMetrics()
    )


def test_client_settings_follow_flags() -> None:
    client = _client(parse_args(["--kube-api-qps=5", "--kube-api-burst=7", "--api-connections=3"]))
    assert client.bucket.unlimited is False
    assert client.pool_count == 3
    assert client._max_connections == 32  # per pool
    assert client._separate_watch_pool is False
    watched = _client(parse_args(["--separate-watch-connection"]))
    assert watched.pool_count == 1
    assert watched._separate_watch_pool is True


async def test_webhook_disabled_builds_no_server() -> None:
    options = parse_args(["--enable-webhook=false"])
    async with _client(options) as client:
        assert await app.prepare_webhook(options, client) is None


async def test_webhook_with_provisioned_certificates(tmp_path: Path) -> None:
    certs = generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace="agent-sandbox-system",
        cluster_domain="cluster.local",
    )
    write_serving_files(tmp_path, certs, cert_name="srv.crt", key_name="srv.key")
    options = parse_args(
        [
            "--manage-webhook-certs=false",
            f"--webhook-cert-dir={tmp_path}",
            "--webhook-cert-name=srv.crt",
            "--webhook-key-name=srv.key",
            "--webhook-port=0",
        ]
    )
    async with _client(options) as client:
        server = await app.prepare_webhook(options, client)
    assert server is not None
    assert server._requested_port == 9443  # 0 means "unset" in controller-runtime
    assert server._cert_file == tmp_path / "srv.crt"


async def test_webhook_with_missing_certificates_fails(tmp_path: Path) -> None:
    options = parse_args(["--manage-webhook-certs=false", f"--webhook-cert-dir={tmp_path}"])
    async with _client(options) as client:
        with pytest.raises(app.StartupError) as caught:
            await app.prepare_webhook(options, client)
    assert caught.value.message == "required webhook cert/key file missing"
    assert "no such file" in caught.value.fields["error"]


async def test_manager_without_leader_election_serves_build_info() -> None:
    options = parse_args(["--leader-elect=false", "--metrics-bind-address=0"])
    async with _client(options) as client:
        manager = app.build_manager(options, client, metrics=RuntimeMetrics(), lease_namespace=None)
    assert manager.leader_election is None
    names = {m.name for m in manager.registry.collect()}
    assert "agent_sandbox_build_info" in names


async def test_manager_uses_upstream_lease() -> None:
    async with _client(ControllerOptions()) as client:
        manager = app.build_manager(
            ControllerOptions(), client, metrics=RuntimeMetrics(), lease_namespace="ns"
        )
    assert manager.leader_election is not None
    assert manager.leader_election.lease_name == "a3317529.agent-sandbox.x-k8s.io"
    assert manager.leader_election.lease_namespace == "ns"
    assert manager.leader_election.release_on_cancel is True
    assert (
        manager.leader_election.lease_duration,
        manager.leader_election.renew_deadline,
        manager.leader_election.retry_period,
    ) == (15.0, 10.0, 2.0)


async def test_extensions_without_plugins_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "load_plugins", list)
    async with _client(ControllerOptions()) as client:
        manager = app.build_manager(
            ControllerOptions(), client, metrics=RuntimeMetrics(), lease_namespace="ns"
        )
        with pytest.raises(app.StartupError, match="no extension plugin is installed"):
            app.setup_extensions(manager, parse_args(["--extensions"]))


FAKE_EXTENSION = """
from kube_agent_sandbox.controller.plugins import ControllerPlugin

CALLS = []

def setup(manager, options):
    CALLS.append((manager, options))

plugin = ControllerPlugin(name={name!r}, setup=setup)
"""


async def test_extension_plugins_get_manager_and_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin contract: ``setup(manager, options)`` of each plugin, in entry point order."""
    from importlib import metadata

    (tmp_path / "fake_ext_first.py").write_text(FAKE_EXTENSION.format(name="first"))
    (tmp_path / "fake_ext_second.py").write_text(FAKE_EXTENSION.format(name="second"))
    monkeypatch.syspath_prepend(str(tmp_path))
    group = "kube_agent_sandbox.extensions"
    entry_points = [
        metadata.EntryPoint("b", "fake_ext_second:plugin", group),
        metadata.EntryPoint("a", "fake_ext_first:plugin", group),
    ]
    monkeypatch.setattr(app, "load_plugins", lambda: app_plugins.load_plugins(entry_points))
    options = parse_args(["--extensions", "--sandbox-claim-concurrent-workers=7"])
    async with _client(options) as client:
        manager = app.build_manager(options, client, metrics=RuntimeMetrics(), lease_namespace="n")
        app.setup_extensions(manager, options)
    import fake_ext_first  # type: ignore[import-not-found]
    import fake_ext_second  # type: ignore[import-not-found]

    for module in (fake_ext_first, fake_ext_second):
        ((got_manager, got_options),) = module.CALLS
        assert got_manager is manager
        assert got_options.sandbox_claim_concurrent_workers == 7
        assert got_options.allowed_label_domains == ()


async def test_an_async_extension_setup_is_a_startup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib import metadata

    (tmp_path / "fake_ext_async.py").write_text(
        "from kube_agent_sandbox.controller.plugins import ControllerPlugin\n"
        "async def setup(manager, options):\n    pass\n"
        "plugin = ControllerPlugin(name='async-ext', setup=setup)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = metadata.EntryPoint(
        "async-ext", "fake_ext_async:plugin", "kube_agent_sandbox.extensions"
    )
    monkeypatch.setattr(app, "load_plugins", lambda: app_plugins.load_plugins([entry]))
    options = parse_args(["--extensions"])
    async with _client(options) as client:
        manager = app.build_manager(options, client, metrics=RuntimeMetrics(), lease_namespace="n")
        with pytest.raises(app.StartupError) as caught:
            app.setup_extensions(manager, options)
    assert caught.value.message == "unable to create controller"
    assert caught.value.fields == {"controller": "async-ext"}
    assert isinstance(caught.value.__cause__, app_plugins.PluginError)


async def test_failing_extension_setup_is_a_startup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib import metadata

    (tmp_path / "fake_ext_broken.py").write_text(
        "from kube_agent_sandbox.controller.plugins import ControllerPlugin\n"
        "def setup(manager, options):\n    raise RuntimeError('nope')\n"
        "plugin = ControllerPlugin(name='broken', setup=setup)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = metadata.EntryPoint("broken", "fake_ext_broken:plugin", "kube_agent_sandbox.extensions")
    monkeypatch.setattr(app, "load_plugins", lambda: app_plugins.load_plugins([entry]))
    options = parse_args(["--extensions"])
    async with _client(options) as client:
        manager = app.build_manager(options, client, metrics=RuntimeMetrics(), lease_namespace="n")
        with pytest.raises(app.StartupError) as caught:
            app.setup_extensions(manager, options)
    assert caught.value.message == "unable to create controller"
    assert caught.value.fields == {"controller": "broken"}
