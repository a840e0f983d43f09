"""Every CI step is a nox session; `nox` with no arguments runs what CI runs.

All sessions share one uv-managed environment (`.venv`, every workspace package editable, the
dev tool chain pinned by uv.lock), so a session starts in a second instead of building its
own virtualenv. `nox -s build` is the exception: it checks each wheel alone in a clean venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = [
    "lint",
    "typecheck",
    "tests",
    "check-generated",
    "docs",
    "build",
    "integration",
    "faults",
    "gateway-acceptance",
    "conformance",
    "bench-quick",
    "e2e",
    "conformance-real-node",
]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PACKAGES = ["api-types", "controller", "extensions", "sdk", "conformance", "gateway", "sandboxd"]
IMPORTS = {
    "api-types": "kube_agent_sandbox.api",
    "conformance": "kube_agent_sandbox.conformance",
    "controller": "kube_agent_sandbox.controller",
    "extensions": "kube_agent_sandbox.extensions",
    "gateway": "kube_agent_sandbox.gateway",
    "sandboxd": "kube_agent_sandbox.sandboxd",
    "sdk": "kube_agent_sandbox.sdk",
}
# Only folders that exist: git keeps no empty folder, so a package without tests has none.
UNIT_TESTS = [
    f"packages/{p}/tests/unit"
    for p in [*PACKAGES, "testing"]
    if (ROOT / "packages" / p / "tests" / "unit").is_dir()
] + ["bench/tests"]
INTEGRATION_TESTS = [
    str(p.relative_to(ROOT)) for p in sorted(ROOT.glob("packages/*/tests/integration"))
]


def _dist_name(package: str) -> str:
    """The distribution name of ``packages/<package>``."""
    return f"kube-agent-sandbox-{package}"


def _sync(session: nox.Session) -> None:
    """Bring .venv in line with uv.lock (fast no-op when nothing changed)."""
    session.run("uv", "sync", "--all-packages", "--all-groups", "--locked", external=True)


def _uv_run(session: nox.Session, *args: str, **kwargs: object) -> None:
    session.run("uv", "run", "--frozen", "--no-sync", *args, external=True, **kwargs)  # type: ignore[arg-type]


PYTEST_NO_TESTS_COLLECTED = 5
"""pytest's exit code when it collected nothing (a wrong path, a -k or -m matching nothing)."""


def _pytest_exit_ok(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    """Run pytest; a run that collects no test is a failure, not a pass.

    nox fails on every non-zero exit already; exit code 5 gets its own message, because
    "no tests ran" after a moved folder or a mistyped filter reads like success otherwise.
    """
    try:
        _uv_run(session, "pytest", *args, *session.posargs, env=env or {})
    except nox.command.CommandFailed as exc:
        if exc.return_code == PYTEST_NO_TESTS_COLLECTED:
            session.error(
                f"pytest collected no test from {' '.join(args + tuple(session.posargs))}: "
                "check the paths and the -k/-m filters"
            )
        raise


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and the import layering contracts."""
    _sync(session)
    _uv_run(session, "ruff", "check", ".")
    _uv_run(session, "ruff", "format", "--check", ".")
    _uv_run(session, "lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources."""
    _sync(session)
    _uv_run(session, "mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests: no cluster needed."""
    _sync(session)
    _pytest_exit_ok(session, *UNIT_TESTS)


@nox.session
def testenv(session: nox.Session) -> None:
    """Build the local cluster's binaries (etcd, Kubernetes, kwok) into the cache.

    ``nox -s testenv -- --with-helm`` adds helm, ``-- --with-prometheus`` prometheus and
    promtool, ``-- --only helm`` builds helm alone.
    """
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """Integration tests against a real kube-apiserver (local cluster by default)."""
    _sync(session)
    # helm: the chart's tests (packages/controller/tests/integration/test_helm_chart.py);
    # promtool: the alert rules' tests (test_alert_rules.py); otelcol: the tracing test
    # (packages/sdk/tests/integration/test_sdk_tracing_live.py).
    _uv_run(
        session,
        "python",
        "-m",
        "kube_agent_sandbox.testing.build",
        "--with-helm",
        "--with-prometheus",
        "--with-otelcol",
    )
    # --cluster-registry: the snapshot tests push to and pull from a real OCI registry (TLS).
    _pytest_exit_ok(
        session, f"--ignore={RESTART_TEST}", "--cluster-registry=tls", *INTEGRATION_TESTS
    )


# Restarts kube-apiserver and compacts etcd. On the shared integration cluster that disturbs the
# tests after it (a rehearsal saw the next one fail; the controller manager, the scheduler and
# every informer back off, up to 30 s, while the server is away and while its RBAC authorizer
# syncs), so it runs alone, on a cluster of its own, right after the integration run (2.5-3
# minutes with the cluster's start).
RESTART_TEST = "packages/extensions/tests/integration/test_reliability_restart.py"


@nox.session
def faults(session: nox.Session) -> None:
    """The apiserver restart and etcd compaction test, on a cluster of its own (CI runs it)."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build")
    _pytest_exit_ok(session, RESTART_TEST)


@nox.session(name="gateway-acceptance")
def gateway_acceptance(session: nox.Session) -> None:
    """The real E2B and MCP clients against the gateway on the local cluster (issues 14, 24),
    and the dashboards' queries against a real Prometheus scraping that stack (issue 23).

    Runs the scenario with the workspace's newest ``e2b`` and with ``e2b`` 2.45.1 (installed
    once into ~/.cache/agent-sandbox/e2b-clients/, so the first run needs the package index),
    and the MCP scenario with the official Python client (Streamable HTTP and stdio) and the
    TypeScript SDK's client (npm, installed once into ~/.cache/agent-sandbox/mcp-clients/),
    and the E2B JavaScript SDK (npm ``e2b`` and ``@e2b/code-interpreter``, the newest and an
    older minor, installed once into ~/.cache/agent-sandbox/e2b-js-clients/; issue 21) with a
    gateway URL and with a domain.
    ``GATEWAY_ACCEPTANCE_RESULTS=<dir>`` keeps each run's steps and timings as JSON.
    """
    _sync(session)
    # prometheus: every dashboard panel's query against the stack (test_observe_dashboards.py)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build", "--with-prometheus")
    _pytest_exit_ok(session, "packages/gateway/tests/acceptance")


@nox.session(name="console-screenshots")
def console_screenshots(session: nox.Session) -> None:
    """Rewrite docs/observe/img/console-*.png: the web console's browser test, screenshotting.

    Not part of check-generated: pixels differ from run to run (ages, names, timings).
    """
    _sync(session)
    _pytest_exit_ok(
        session,
        "packages/gateway/tests/acceptance/test_console_browser.py",
        env={"CONSOLE_SCREENSHOTS": str(ROOT / "docs" / "observe" / "img")},
    )


@nox.session
def e2e(session: nox.Session) -> None:
    """End-to-end tests: controller deployed in the cluster, driven through kubectl and the API."""
    _sync(session)
    # containerd 2.3 and CRIU 4.2 on the node: the memory snapshot's e2e test restores a
    # checkpointed process (the whole suite passes on them: 41 tests in 6 min here).
    _uv_run(
        session,
        "python",
        "-m",
        "kube_agent_sandbox.testing.build",
        "--with-node",
        "--with-helm",
        "--with-containerd2",
        "--with-criu",
    )
    _pytest_exit_ok(session, "e2e", env={"AGENT_SANDBOX_E2E_CHECKPOINT": "1"})


@nox.session
def conformance(session: nox.Session) -> None:
    """The black-box conformance suite (reports in conformance-results/).

    ``nox -s conformance -- [--kubeconfig PATH] [--namespace-prefix P]
    [--profile core|extensions|real-node|all] [--controller-cmd CMD] [--report-dir DIR]``;
    without --kubeconfig the local cluster and our controller are started; the default
    profiles are core and extensions.
    """
    _sync(session)
    if "--kubeconfig" not in " ".join(session.posargs):
        real_node = "real-node" in session.posargs or "all" in session.posargs
        build = ["--with-node"] if real_node else []
        _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build", *build)
    _uv_run(session, "agent-sandbox-conformance", *session.posargs)


@nox.session(name="conformance-real-node")
def conformance_real_node(session: nox.Session) -> None:
    """The conformance suite's real-node profile (root; reports in conformance-results/real-node).

    The real-node cluster with our controller deployed into it, as the e2e suite runs.
    """
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build", "--with-node")
    _uv_run(
        session,
        "agent-sandbox-conformance",
        "--profile",
        "real-node",
        "--report-dir",
        "conformance-results/real-node",
        *session.posargs,
    )


@nox.session
def cluster(session: nox.Session) -> None:
    """Start the local cluster for manual use; prints KUBECONFIG and how to stop it."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.cluster", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a local cluster, the controller, and a demo sandbox, step by step."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build", "--with-node")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.demo", *session.posargs)


@nox.session
def generate(session: nox.Session) -> None:
    """Rewrite every generated file (CRDs, RBAC, the sync SDK, the MCP tool reference, the
    dashboards and alert rules)."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.api.crdgen")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.controller.rbacgen")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.gateway.rbacgen")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.extensions.snapshot.rbacgen")
    _uv_run(session, "python", "scripts/unasync_sdk.py")
    _uv_run(session, "python", "scripts/mcp_tool_reference.py")
    _uv_run(session, "python", "scripts/observability.py")


@nox.session(name="check-generated")
def check_generated(session: nox.Session) -> None:
    """Fail when a generated file is stale."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.api.crdgen", "--check")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.controller.rbacgen", "--check")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.gateway.rbacgen", "--check")
    _uv_run(session, "python", "-m", "kube_agent_sandbox.extensions.snapshot.rbacgen", "--check")
    _uv_run(session, "python", "scripts/unasync_sdk.py", "--check")
    _uv_run(session, "python", "scripts/mcp_tool_reference.py", "--check")
    _uv_run(session, "python", "scripts/observability.py", "--check")
    _uv_run(session, "python", "scripts/e2b_compatibility.py", "--check")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; any warning is an error."""
    _sync(session)
    _uv_run(
        session,
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        "site",
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


@nox.session
def build(session: nox.Session) -> None:
    """Build wheels and sdists of the packages; each wheel must install alone and import."""
    _sync(session)
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for package in PACKAGES:
        session.run(
            "uv", "build", "--quiet", "--out-dir", str(dist), f"packages/{package}", external=True
        )
    wheels = {
        p: _one(dist.glob(f"kube_agent_sandbox_{p.replace('-', '_')}-*.whl")) for p in PACKAGES
    }
    for package, wheel in wheels.items():
        with tempfile.TemporaryDirectory(prefix=f"wheel-{package}-") as tmp:
            venv = Path(tmp) / "venv"
            session.run(
                "uv", "venv", "--quiet", "--python", sys.executable, str(venv), external=True
            )
            python = str(venv / "bin" / "python")
            # Siblings come from dist/ (pinned ==), everything else from the index.
            # uv caches a local wheel by name and version, which ours never change: refresh
            # our own packages so a sibling is the one just built, not an older build's.
            refresh = [arg for p in PACKAGES for arg in ("--refresh-package", _dist_name(p))]
            session.run(
                "uv", "pip", "install", "--quiet", "--python", python, *refresh,
                "--find-links", str(dist), str(wheel), external=True,
            )  # fmt: skip
            code = f"import {IMPORTS[package]} as m; print(m.__name__, m.__version__)"
            session.run(python, "-c", code, external=True)
            if package == "controller":
                session.run(
                    str(venv / "bin" / "agent-sandbox-controller"), "--version", external=True
                )
            if package == "sdk":
                session.run(str(venv / "bin" / "agent-sandbox"), "--help", external=True)
                # the SDK alone must not pull in the controller
                session.run(
                    python, "-c",
                    "import importlib.util as u; "
                    "assert u.find_spec('kube_agent_sandbox.controller') is None",
                    external=True,
                )  # fmt: skip
            if package == "gateway":
                session.run(str(venv / "bin" / "agent-sandbox-gateway"), "--help", external=True)
            if package == "sandboxd":
                for script in ("sandboxd", "sandboxd-interpreter"):
                    session.run(str(venv / "bin" / script), "--help", external=True)
                # installed alone into sandbox images: nothing else of ours comes along
                session.run(
                    python, "-c",
                    "import importlib.util as u; "
                    "assert u.find_spec('kube_agent_sandbox.api') is None",
                    external=True,
                )  # fmt: skip
                # the language drivers are data files next to the code: they must ship too
                session.run(
                    python, "-c",
                    "import pathlib, kube_agent_sandbox.sandboxd.interpreter as i; "
                    "d = pathlib.Path(i.__file__).parent; "
                    "missing = [f for f in ('driver.py', 'driver.js', 'driver.R') "
                    "if not (d / f).is_file()]; "
                    "assert not missing, f'not in the wheel: {missing}'",
                    external=True,
                )  # fmt: skip
            if package == "conformance":
                session.run(
                    str(venv / "bin" / "agent-sandbox-conformance"), "--help", external=True
                )
                # the suite is black-box: it must not bring any implementation along
                session.run(
                    python, "-c",
                    "import importlib.util as u; "
                    "assert u.find_spec('kube_agent_sandbox.controller') is None; "
                    "assert u.find_spec('kube_agent_sandbox.extensions') is None",
                    external=True,
                )  # fmt: skip
    session.log(f"built and checked: {', '.join(sorted(p.name for p in dist.iterdir()))}")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: print numbers and write results under bench/results/ (``-- --quick``: smoke)."""
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build")
    _uv_run(session, "python", "bench/run.py", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """Soak: 10,000 Sandboxes created, suspended, resumed, deleted; RSS plot and report.

    Not in the default list (hours at full size). ``nox -s soak -- --quick`` (200 Sandboxes,
    a few minutes) fits CI; ``-- --sandboxes N --wave W --rate R --duration S`` size the run.
    """
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build")
    _uv_run(session, "python", "bench/soak.py", *session.posargs)


@nox.session(name="bench-quick")
def bench_quick(session: nox.Session) -> None:
    """Every benchmark scenario at tiny sizes: fails if the harness breaks or a claim is lost.

    A smoke run for CI: speed is reported, never judged.
    """
    _sync(session)
    _uv_run(session, "python", "-m", "kube_agent_sandbox.testing.build")
    _uv_run(session, "python", "bench/run.py", "--quick", *session.posargs)


def _one(paths: object) -> Path:
    found = sorted(paths)  # type: ignore[call-overload]
    if len(found) != 1:
        raise RuntimeError(f"expected exactly one file, found {found}")
    return Path(found[0])


if os.environ.get("CI") == "true" and shutil.which("uv") is None:  # pragma: no cover
    subprocess.run([sys.executable, "-m", "pip", "install", "uv"], check=True)
