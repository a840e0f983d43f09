"""The project's pytest plugin: one real cluster per session for integration and e2e tests.

Registered as the ``agent_sandbox`` pytest11 entry point. Fixtures:

- ``cluster`` (session): a :class:`~kube_agent_sandbox.testing.access.ClusterAccess` for the
  cluster of the chosen provider (``--cluster-provider`` or ``AGENT_SANDBOX_CLUSTER_PROVIDER``:
  ``local`` by default, ``kind``, ``existing``), with the project's generated CRDs installed.
- ``agent_sandbox_crds`` (session): the installed CRD names; unavailable when none were found.
- ``local_cluster`` (session): the :class:`~kube_agent_sandbox.testing.cluster.LocalCluster`
  behind ``cluster`` (local provider only).
- ``oci_registry`` (session): the local cluster's OCI registry
  (:class:`~kube_agent_sandbox.testing.registry.RunningRegistry`), when ``--cluster-registry``
  (or ``AGENT_SANDBOX_CLUSTER_REGISTRY``) is ``tls`` or ``http``.
- the local cluster's kwok serves pod logs (``testing.podlogs``) unless ``--cluster-pod-logs=off``
  (or ``AGENT_SANDBOX_CLUSTER_POD_LOGS=off``): two small CRDs and a loopback port, ~0.2 s once
  per session. ``kwok_pod_logs`` (session) gives the cluster's access then, and is unavailable
  otherwise.
- ``namespace``: a fresh namespace per test (with its default ServiceAccount), deleted after.
- ``controller_runner``: a :class:`~kube_agent_sandbox.testing.controller_runner.ControllerRunner`
  whose controllers and identities are cleaned up after the test.

When a test fails, the tail of every component's log is attached to its report. A missing
prerequisite (binaries, Docker for kind, CRDs, ...) skips with the reason, but fails under
``CI=true``: CI must never turn green by skipping.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError
from kube_agent_sandbox.testing.providers import (
    PROVIDER_ENV,
    PROVIDERS,
    ProvidedCluster,
    ProviderOptions,
    start_cluster,
)
from kube_agent_sandbox.testing.registry import RegistryOptions, RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

CRDS_ENV = "AGENT_SANDBOX_CRDS"
REGISTRY_ENV = "AGENT_SANDBOX_CLUSTER_REGISTRY"
POD_LOGS_ENV = "AGENT_SANDBOX_CLUSTER_POD_LOGS"
#: ``--cluster-registry`` values: TLS with credentials, plain HTTP with credentials, or none.
REGISTRY_MODES: dict[str, RegistryOptions | None] = {
    "none": None,
    "tls": RegistryOptions(tls=True),
    "http": RegistryOptions(tls=False),
}
_ACTIVE = pytest.StashKey[ProvidedCluster]()
_LOG_LINES = 60


def unavailable(reason: str) -> NoReturn:
    """Skip the test for a missing prerequisite, or fail it when ``CI=true``.

    Args:
        reason: What is missing and how to get it.
    """
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"prerequisite missing (CI=true, so this fails): {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the cluster options."""
    group = parser.getgroup("agent-sandbox", "Agent Sandbox test cluster")
    group.addoption(
        "--cluster-provider",
        choices=PROVIDERS,
        default=None,
        help=f"where the test cluster comes from (default: ${PROVIDER_ENV} or 'local')",
    )
    group.addoption(
        "--cluster-crds",
        action="append",
        type=Path,
        default=None,
        help=f"CRD file/directory to install (repeatable; default: ${CRDS_ENV} or manifests/crds)",
    )
    group.addoption("--cluster-nodes", type=int, default=2, help="kwok nodes (local provider)")
    group.addoption(
        "--cluster-workdir",
        type=Path,
        default=None,
        help="keep the local cluster's certificates, kubeconfigs and logs in this directory",
    )
    group.addoption(
        "--cluster-registry",
        choices=tuple(REGISTRY_MODES),
        default=None,
        help=f"local provider: also run an OCI registry (default: ${REGISTRY_ENV} or 'none')",
    )
    group.addoption(
        "--cluster-pod-logs",
        choices=("on", "off"),
        default=None,
        help=f"local provider: kwok serves pod logs (default: ${POD_LOGS_ENV} or 'on')",
    )
    group.addoption("--cluster-kubeconfig", type=Path, default=None, help="for 'existing'")
    group.addoption("--cluster-kind-name", default="agent-sandbox", help="kind cluster name")
    group.addoption("--cluster-kind-bin", type=Path, default=None, help="local kind binary")
    group.addoption("--cluster-kind-kubectl-bin", type=Path, default=None, help="kubectl for kind")
    group.addoption("--cluster-kind-image", default=None, help="kind node image")
    group.addoption(
        "--cluster-keep", action="store_true", help="keep the kind cluster after the run"
    )


def _crd_sources(config: pytest.Config) -> list[Path]:
    given: list[Path] | None = config.getoption("cluster_crds")
    if given:
        return given
    env = os.environ.get(CRDS_ENV)
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    default = config.rootpath / "manifests" / "crds"
    return [default] if any(default.glob("*.yaml")) else []


def _path(config: pytest.Config, option: str) -> Path | None:
    value = config.getoption(option, None)
    return Path(value) if value else None


def provider_options(config: pytest.Config) -> tuple[str, ProviderOptions]:
    """The provider name and its options from the command line and environment.

    Args:
        config: The pytest config.

    Returns:
        Provider name and options.
    """
    provider = (
        config.getoption("cluster_provider") or os.environ.get(PROVIDER_ENV) or "local"
    ).strip()
    pod_logs = (
        config.getoption("cluster_pod_logs") or os.environ.get(POD_LOGS_ENV) or "on"
    ).strip()
    if pod_logs not in ("on", "off"):
        raise pytest.UsageError(f"{POD_LOGS_ENV} must be 'on' or 'off', not {pod_logs!r}")
    options = ProviderOptions(
        crds=_crd_sources(config),
        nodes=config.getoption("cluster_nodes"),
        workdir=config.getoption("cluster_workdir"),
        # pytest-kind's own options (--kind-bin, ...) count too when it is installed.
        kind_name=config.getoption("cluster_kind_name"),
        kind_bin=config.getoption("cluster_kind_bin") or _path(config, "kind_bin"),
        kind_kubectl_bin=(
            config.getoption("cluster_kind_kubectl_bin") or _path(config, "kind_kubectl_bin")
        ),
        kind_image=config.getoption("cluster_kind_image") or config.getoption("kind_image", None),
        keep_cluster=config.getoption("cluster_keep") or config.getoption("keep_cluster", False),
        kubeconfig=config.getoption("cluster_kubeconfig"),
        registry=REGISTRY_MODES[
            (config.getoption("cluster_registry") or os.environ.get(REGISTRY_ENV) or "none").strip()
        ],
        pod_logs=pod_logs == "on",
    )
    return provider, options


@pytest.fixture(scope="session")
def _provided_cluster(request: pytest.FixtureRequest) -> Iterator[ProvidedCluster]:
    provider, options = provider_options(request.config)
    try:
        provided = start_cluster(provider, options)
    except PrerequisiteError as err:
        unavailable(str(err))
    request.config.stash[_ACTIVE] = provided
    try:
        yield provided
    finally:
        del request.config.stash[_ACTIVE]
        provided.stop()


@pytest.fixture(scope="session")
def cluster(_provided_cluster: ProvidedCluster) -> ClusterAccess:
    """The session's cluster: kubeconfig, Python client, kubectl, apply, waits, logs."""
    return _provided_cluster.access


@pytest.fixture(scope="session")
def local_cluster(_provided_cluster: ProvidedCluster) -> LocalCluster:
    """The LocalCluster behind ``cluster`` (skipped for other providers)."""
    if _provided_cluster.local is None:
        pytest.skip("needs the local cluster provider")
    return _provided_cluster.local


@pytest.fixture(scope="session")
def oci_registry(local_cluster: LocalCluster) -> RunningRegistry:
    """The local cluster's OCI registry (``--cluster-registry=tls|http``)."""
    if local_cluster.registry is None:
        unavailable(
            "the local cluster runs no OCI registry: pass --cluster-registry=tls|http "
            f"or set ${REGISTRY_ENV}"
        )
    return local_cluster.registry


@pytest.fixture(scope="session")
def kwok_pod_logs(local_cluster: LocalCluster) -> ClusterAccess:
    """The local cluster, once its kwok serves pod logs (``testing.podlogs``)."""
    if not local_cluster.options.pod_logs or local_cluster.access is None:
        unavailable(f"kwok serves no pod logs: pass --cluster-pod-logs=on or set {POD_LOGS_ENV}=on")
    return local_cluster.access


@pytest.fixture(scope="session")
def agent_sandbox_crds(_provided_cluster: ProvidedCluster) -> list[str]:
    """Names of the project's CRDs installed in the session cluster."""
    if not _provided_cluster.crd_names:
        unavailable(
            "no CRDs to install: generate them (nox -s generate -> manifests/crds) "
            f"or point --cluster-crds/${CRDS_ENV} at them"
        )
    return _provided_cluster.crd_names


def namespace_name(test_name: str) -> str:
    """A unique, valid namespace name derived from a test name.

    Args:
        test_name: The test's name (any characters).

    Returns:
        ``t-<sanitised name, at most 48 chars>-<6 random hex>``.
    """
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:48].strip("-")
    return f"t-{base or 'test'}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(cluster: ClusterAccess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (ready for pods), deleted afterwards."""
    name = namespace_name(request.node.name)
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        # Pods are rejected until the namespace's default ServiceAccount exists.
        wait_for_object(
            cluster.api_client(),
            ObjectRef("v1", "ServiceAccount", "default", name),
            lambda _: True,
            timeout=60,
            what="default ServiceAccount",
        )
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def controller_runner(cluster: ClusterAccess, tmp_path: Path) -> Iterator[ControllerRunner]:
    """Runs controllers against the cluster as chosen identities; cleans up after the test."""
    runner = ControllerRunner(cluster, tmp_path / "controller-runner")
    try:
        yield runner
    finally:
        runner.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each cluster component's log to a failing test's report."""
    report = yield
    provided = item.config.stash.get(_ACTIVE, None)
    if report.failed and provided is not None:
        for name, tail in provided.access.log_tails(_LOG_LINES).items():
            report.sections.append((f"cluster log: {name} (last {_LOG_LINES} lines)", tail))
    return report
