"""``agent-sandbox-conformance``: run the suite and write its reports.

With ``--kubeconfig`` the suite tests what is installed in that cluster and touches only its own
namespaces. Without one, the local test cluster is started with our controller (or the command
of ``--controller-cmd``) and stopped at the end (:mod:`.local`; needs the project's test
harness). Reports land in ``--report-dir``: ``junit.xml``, ``summary.json``, ``summary.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kube_agent_sandbox.conformance import report
from kube_agent_sandbox.conformance.target import Target

_log = logging.getLogger(__name__)

PROFILES = ("core", "extensions", "real-node", "all")
MARKERS = {"core": "core", "extensions": "extensions", "real-node": "real_node"}
TESTS_DIR = Path(__file__).parent / "tests"
DEFAULT_REPORT_DIR = Path("conformance-results")
# Real-node tests run shell scripts and python3; kwok nodes ignore the image.
REAL_NODE_IMAGE = "python:3.12-slim"


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The runner's options; unknown arguments are passed on to pytest.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when None).

    Returns:
        The parsed options and the extra pytest arguments.
    """
    parser = argparse.ArgumentParser(
        prog="agent-sandbox-conformance",
        description="Run the Agent Sandbox conformance suite (extra arguments go to pytest).",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="test what is installed in this cluster (default: start the local cluster)",
    )
    parser.add_argument(
        "--namespace-prefix", default="conformance", help="prefix of the suite's namespaces"
    )
    parser.add_argument(
        "--profile",
        action="append",
        choices=PROFILES,
        default=None,
        help="profile(s) to run (repeatable; default: core and extensions)",
    )
    parser.add_argument(
        "--controller-cmd",
        default=None,
        help="run this controller command against the local cluster instead of ours "
        "(KUBECONFIG is set; {kubeconfig}, {webhook_port}, {cert_dir} are substituted)",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=DEFAULT_REPORT_DIR,
        help=f"where reports go (default: {DEFAULT_REPORT_DIR}/)",
    )
    parser.add_argument(
        "--image",
        default=None,
        help="container image of the sandboxes (default: pause for kwok profiles; with "
        f"--kubeconfig and the real-node profile {REAL_NODE_IMAGE}; locally the node's image)",
    )
    parser.add_argument(
        "--update-docs",
        type=Path,
        default=None,
        metavar="PAGE",
        help="put the markdown summary into PAGE below its '<!-- conformance-report -->' line",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds each wait lasts (default: 60)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log the harness's steps")
    args, extra = parser.parse_known_args(argv)
    return args, [a for a in extra if a != "--"]


def profiles(requested: Sequence[str] | None) -> list[str]:
    """The profiles to run (``all`` expands; default core + extensions)."""
    chosen = list(requested or ["core", "extensions"])
    if "all" in chosen:
        return list(MARKERS)
    return list(dict.fromkeys(chosen))


def pytest_args(
    args: argparse.Namespace, target: Target, chosen: Sequence[str], extra: Sequence[str]
) -> list[str]:
    """The pytest command line of one run.

    Args:
        args: The runner's options.
        target: Cluster and implementation under test.
        chosen: Profiles to run.
        extra: Extra pytest arguments.

    Returns:
        Arguments for ``pytest.main``.
    """
    report_dir: Path = args.report_dir
    command = [
        str(TESTS_DIR),
        "-p",
        "kube_agent_sandbox.conformance.plugin",
        # The project's own pytest plugins must not mix in (same fixture names).
        "-p",
        "no:agent_sandbox",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
        "-c",
        os.devnull,
        f"--rootdir={TESTS_DIR}",
        "--import-mode=importlib",
        "--strict-markers",
        "-o",
        "xfail_strict=true",
        "-ra",
        "-m",
        " or ".join(MARKERS[p] for p in chosen),
        f"--namespace-prefix={args.namespace_prefix}",
        f"--conformance-timeout={args.timeout}",
        f"--implementation={target.implementation}",
        f"--junitxml={report_dir / 'junit.xml'}",
        f"--report-json={report_dir / 'summary.json'}",
        f"--report-md={report_dir / 'summary.md'}",
    ]
    if target.kubeconfig is not None:
        command.append(f"--kubeconfig={target.kubeconfig}")
    image = args.image or target.image
    if image is None and "real-node" in chosen and target.kubeconfig is not None:
        image = REAL_NODE_IMAGE
    if image:
        command.append(f"--conformance-image={image}")
    return [*command, *extra]


@contextlib.contextmanager
def installed(kubeconfig: Path) -> Iterator[Target]:
    """What is installed in an existing cluster (nothing is started or stopped)."""
    yield Target(kubeconfig=kubeconfig, implementation=f"installed ({kubeconfig})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when None).

    Returns:
        pytest's exit status (0 when every selected test passed).
    """
    args, extra = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
    )
    chosen = profiles(args.profile)
    if args.kubeconfig is not None:
        if args.controller_cmd:
            _log.error("--controller-cmd runs against the local cluster; drop --kubeconfig")
            return 2
        return _run(args, installed(args.kubeconfig), chosen, extra)
    try:  # only here: the local environments need the project's test harness
        from kube_agent_sandbox.conformance.local import environment as local_environment
    except ImportError as err:
        _log.error(
            "without --kubeconfig the runner starts the local cluster, which needs the "
            "project's test harness (kube-agent-sandbox-testing, a repository checkout): %s",
            err,
        )
        return 2

    command = shlex.split(args.controller_cmd) if args.controller_cmd else None
    groups = local_groups(chosen)
    status = 0
    for group in groups:
        group_args = args
        if len(groups) > 1:  # one cluster per group: reports in a subfolder each
            group_args = argparse.Namespace(
                **{
                    **vars(args),
                    "report_dir": args.report_dir
                    / ("real-node" if group == ["real-node"] else "kwok"),
                }
            )
        try:
            environment = local_environment(group, controller_cmd=command)
            status = max(status, _run(group_args, environment, group, extra))
        except (FileNotFoundError, ValueError) as err:
            _log.error("%s", err)
            return 2
    return status


def local_groups(chosen: Sequence[str]) -> list[list[str]]:
    """Profiles grouped by the local cluster they need (kwok nodes, or the real node)."""
    kwok = [p for p in chosen if p != "real-node"]
    return [g for g in (kwok, [p for p in chosen if p == "real-node"]) if g]


def _run(
    args: argparse.Namespace,
    environment: contextlib.AbstractContextManager[Target],
    chosen: Sequence[str],
    extra: Sequence[str],
) -> int:
    with environment as target:
        _log.info("running profiles %s against %s", ", ".join(chosen), target.implementation)
        status = int(pytest.main(pytest_args(args, target, chosen, extra)))
    summary_file = args.report_dir / "summary.json"
    if args.update_docs is not None and summary_file.is_file():
        report.embed_in_page(json.loads(summary_file.read_text()), args.update_docs)
        _log.info("report written into %s", args.update_docs)
    return status


if __name__ == "__main__":
    sys.exit(main())
