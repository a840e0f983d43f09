"""Issue 24: the TypeScript SDK's MCP client (``@modelcontextprotocol/sdk`` on Node) against /mcp.

The npm package is installed once into ``~/.cache/agent-sandbox/mcp-clients/`` (like the E2B
clients' venvs); a missing Node or registry skips locally and fails under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.testing.npm import CACHE, npm_package

sys.path.insert(0, str(Path(__file__).parent))
import mcp_scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TS_SDK = "1.32.2"
CLIENTS_CACHE = CACHE / "mcp-clients"
SCRIPT = Path(__file__).with_name("mcp_ts_client.mjs")


@pytest.fixture(scope="module")
def ts_client_dir() -> Path:
    """A folder with the pinned TypeScript SDK in ``node_modules`` (npm, on first use)."""
    root = CLIENTS_CACHE / f"typescript-{TS_SDK}"
    return npm_package(root, "@modelcontextprotocol/sdk", TS_SDK, module=True)


def test_typescript_client_over_streamable_http(gateway_stack: Any, ts_client_dir: Path) -> None:
    script = ts_client_dir / SCRIPT.name
    shutil.copyfile(SCRIPT, script)  # node resolves the package from the script's folder
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "MCP_URL": f"{gateway_stack.url}/mcp",
        "MCP_KEY": gateway_stack.api_key,
        "MCP_POOL": "code-interpreter-v1",
        "MCP_ROOT": str(gateway_stack.workdir),
        "MCP_PNG_CODE": mcp_scenario.PNG_CODE,
    }
    done = subprocess.run(
        ["node", str(script)], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, f"{done.stderr}\n{gateway_stack.logs()}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(seen["tools"]) == mcp_scenario.TOOLS
    assert not seen["write"]["isError"], seen["write"]
    assert seen["code"]["stdout"].strip() == "st morf olleh", seen["code"]
    assert seen["images"] == ["image/png"]
    assert seen["unknownArg"]["isError"], seen["unknownArg"]
    assert "no argument 'recursive'" in seen["unknownArg"]["text"]
    assert seen["outside"]["isError"], seen["outside"]
    assert "outside the sandbox's file root" in seen["outside"]["text"]
    assert seen["stillServing"]
    assert not seen["deleted"]["isError"], seen["deleted"]
    assert seen["afterDelete"]["isError"]
    assert "list_sandboxes" in seen["afterDelete"]["text"]
