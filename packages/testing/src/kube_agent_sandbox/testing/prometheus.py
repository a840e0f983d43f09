"""A real Prometheus for the tests: started on loopback, scraping given targets every second.

The binary is built from Prometheus' Go module into the testenv cache
(``python -m kube_agent_sandbox.testing.build --only prometheus``).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ProcessSupervisor, wait_until


def prometheus_binary() -> Path:
    """Where the build puts the prometheus binary (it may be missing)."""
    return versions.bin_dir() / "prometheus"


def start_prometheus(
    supervisor: ProcessSupervisor,
    workdir: Path,
    targets: Mapping[str, str],
    *,
    rule_files: Sequence[Path] = (),
) -> str:
    """Start Prometheus scraping ``targets`` (job -> ``host:port``) every second, evaluating
    ``rule_files`` every second.

    Returns:
        Its base URL, once ``/-/ready`` answers.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]}
            for job, target in targets.items()
        ],
        "rule_files": [str(p) for p in rule_files],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    process = supervisor.start(
        "prometheus",
        [
            str(prometheus_binary()),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_until(ready, timeout=60, what="prometheus /-/ready", process=process)
    return url


def instant_query(url: str, expr: str) -> list[dict[str, Any]]:
    """The result vector of an instant query (raises on a query error)."""
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        body = json.loads(answer.read())
    if body.get("status") != "success":
        raise AssertionError(f"query {expr!r} failed: {body}")
    return list(body["data"]["result"])


def firing_alerts(url: str) -> list[dict[str, Any]]:
    """The alerts in state ``firing``."""
    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=10) as answer:
        body = json.loads(answer.read())
    return [a for a in body["data"]["alerts"] if a.get("state") == "firing"]
