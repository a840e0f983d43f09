"""etcd of the local cluster: compacting its history, and data directories left in memory.

Kept apart from :mod:`~kube_agent_sandbox.testing.cluster`: these need only etcd's URL or the
folder of its data, not the cluster.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

_log = logging.getLogger(__name__)


ETCD_PREFIX = "agent-sandbox-etcd-"


def remove_stale_etcd_dirs(shm: Path) -> None:
    """Remove etcd data dirs left in memory by clusters whose Python process was killed."""
    for directory in shm.glob(f"{ETCD_PREFIX}*-*"):
        owner = directory.name.removeprefix(ETCD_PREFIX).split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            _log.info("removing %s, left by dead process %s", directory, owner)
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            continue


def compact_etcd(etcd_url: str) -> int:
    """Compact etcd's history up to its current revision (what ``etcdctl compact`` does).

    Args:
        etcd_url: The client URL of etcd (``http://127.0.0.1:port``).

    Returns:
        The revision compacted to.
    """

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    # the v3 JSON gateway: any read returns the store's current revision in its header
    header = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]
    revision = int(header["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    _log.info("compacted etcd to revision %d", revision)
    return revision
