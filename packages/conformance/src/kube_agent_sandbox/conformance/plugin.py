"""The conformance suite's pytest plugin: options, markers, fixtures and the run's reports.

Loaded with ``-p kube_agent_sandbox.conformance.plugin`` (the runner does this; it is not an
auto-loaded entry point, so the project's other test runs never see it). It gives tests:

- ``kube`` (session): a :class:`~kube_agent_sandbox.conformance.client.Kube` for the cluster of
  ``--kubeconfig`` (default: ``$KUBECONFIG``, ``~/.kube/config`` or in-cluster).
- ``namespace``: a fresh namespace ``<--namespace-prefix>-<test>-<random>``, deleted after.
- ``settings`` (session): the run's :class:`Settings` (image, timeouts).

Markers: ``core``, ``extensions``, ``real_node`` (the profile; set from the test's folder) and
``spec(section, ...)``, which every test must carry. ``--report-json``/``--report-md`` write the
per-section summary at the end of the session (:mod:`.report`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_agent_sandbox.conformance import report
from kube_agent_sandbox.conformance.client import ApiError, Kube, load_api_client
from kube_agent_sandbox.conformance.manifests import DEFAULT_IMAGE

_log = logging.getLogger(__name__)

PROFILE_MARKERS = {"core": "core", "extensions": "extensions", "realnode": "real_node"}
MANAGED_BY = {"app.kubernetes.io/managed-by": "agent-sandbox-conformance"}
_SPEC_SECTION = re.compile(r"^(delta-)?\d+(\.\d+)*$")
_RESULTS = pytest.StashKey[report.Collector]()


@dataclass(frozen=True)
class Settings:
    """What the run was told: where objects go and how long waits last."""

    namespace_prefix: str
    image: str
    timeout: float
    implementation: str


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite's options."""
    group = parser.getgroup("conformance", "Agent Sandbox conformance suite")
    group.addoption("--kubeconfig", default=None, help="kubeconfig of the cluster under test")
    group.addoption(
        "--namespace-prefix",
        default="conformance",
        help="prefix of the namespaces the suite creates (default: conformance)",
    )
    group.addoption(
        "--conformance-image",
        default=DEFAULT_IMAGE,
        help=f"container image of the sandboxes' pods (default: {DEFAULT_IMAGE})",
    )
    group.addoption(
        "--conformance-timeout",
        type=float,
        default=60.0,
        help="seconds a wait for the implementation lasts (default: 60)",
    )
    group.addoption(
        "--implementation",
        default="unknown",
        help="what is under test (recorded in the reports)",
    )
    group.addoption("--report-json", type=Path, default=None, help="write the JSON summary here")
    group.addoption("--report-md", type=Path, default=None, help="write the markdown table here")


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers and start collecting results."""
    config.addinivalue_line("markers", "core: core profile (Sandbox controller)")
    config.addinivalue_line(
        "markers", "extensions: extensions profile (template, warm pool, claim)"
    )
    config.addinivalue_line("markers", "real_node: needs a real node (containers that run)")
    config.addinivalue_line(
        "markers",
        "spec(*sections): spec sections the test checks: '3.3' = upstream-v0.5.4.md, "
        "'delta-3.2' = upstream-delta-v0.5.6.md",
    )
    config.stash[_RESULTS] = report.Collector()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's profile and insist on a valid ``spec`` marker.

    Raises:
        pytest.UsageError: If a test lacks ``@pytest.mark.spec(...)`` or names no valid section.
    """
    problems = []
    for item in items:
        parts = Path(str(item.path)).parts
        for folder, marker in PROFILE_MARKERS.items():
            if folder in parts and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        sections = spec_sections(item)
        if not sections:
            problems.append(f"{item.nodeid}: missing @pytest.mark.spec(<section>)")
        for section in sections:
            if not _SPEC_SECTION.match(section):
                problems.append(f"{item.nodeid}: bad spec section {section!r}")
    if problems:
        raise pytest.UsageError("\n".join(problems))


def spec_sections(item: pytest.Item) -> list[str]:
    """The spec sections a test names (all ``spec`` markers, in order)."""
    return [str(s) for mark in item.iter_markers("spec") for s in mark.args]


def profile_of(item: pytest.Item) -> str:
    """The test's profile name (``core``, ``extensions``, ``real_node``) or ``""``."""
    for marker in ("real_node", "extensions", "core"):
        if item.get_closest_marker(marker) is not None:
            return marker
    return ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Record each test's outcome under its spec sections."""
    result = yield
    collector = item.config.stash.get(_RESULTS, None)
    if collector is not None:
        collector.add(result, sections=spec_sections(item), profile=profile_of(item))
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the JSON and markdown summaries when asked to."""
    config = session.config
    collector = config.stash.get(_RESULTS, None)
    json_path: Path | None = config.getoption("report_json")
    md_path: Path | None = config.getoption("report_md")
    if collector is None or (json_path is None and md_path is None):
        return
    summary = collector.summary(
        implementation=config.getoption("implementation"),
        cluster_version=collector.cluster_version,
    )
    if json_path is not None:
        report.write_json(summary, json_path)
    if md_path is not None:
        report.write_markdown(summary, md_path)


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    """The run's settings from the command line."""
    return Settings(
        namespace_prefix=pytestconfig.getoption("namespace_prefix"),
        image=pytestconfig.getoption("conformance_image"),
        timeout=pytestconfig.getoption("conformance_timeout"),
        implementation=pytestconfig.getoption("implementation"),
    )


@pytest.fixture(scope="session")
def workload_image(settings: Settings) -> str:
    """The image of the sandboxes' containers (``--conformance-image``; on the real node the
    runner passes an image with ``/bin/sh`` and ``python3`` that the node already has)."""
    return settings.image


@pytest.fixture(scope="session")
def kube(pytestconfig: pytest.Config, settings: Settings) -> Iterator[Kube]:
    """The API client of the cluster under test."""
    client = Kube(
        load_api_client(pytestconfig.getoption("kubeconfig")), default_timeout=settings.timeout
    )
    collector = pytestconfig.stash.get(_RESULTS, None)
    if collector is not None and not collector.cluster_version:
        collector.cluster_version = client.server_version()
    try:
        yield client
    finally:
        client.close()


def namespace_name(prefix: str, test_name: str) -> str:
    """A unique, valid namespace name: ``<prefix>-<test name>-<6 hex>`` within 63 characters.

    Args:
        prefix: The ``--namespace-prefix``.
        test_name: The test's name (any characters).

    Returns:
        The name.
    """
    suffix = secrets.token_hex(3)
    base = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{test_name}".lower()).strip("-")
    base = base[: 63 - len(suffix) - 1].strip("-")
    return f"{base or 'conformance'}-{suffix}"


@pytest.fixture
def namespace(kube: Kube, settings: Settings, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (ready for pods), deleted afterwards."""
    name = namespace_name(settings.namespace_prefix, request.node.name.removeprefix("test_"))
    kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": MANAGED_BY}}
    )
    try:
        # Pods are rejected until the namespace's default ServiceAccount exists.
        kube.wait_until(
            lambda: kube.get_or_none("v1", "ServiceAccount", "default", name),
            what=f"default ServiceAccount in {name}",
        )
        yield name
    finally:
        try:
            kube.delete("v1", "Namespace", name)
        except ApiError:
            _log.warning("could not delete namespace %s", name, exc_info=True)
