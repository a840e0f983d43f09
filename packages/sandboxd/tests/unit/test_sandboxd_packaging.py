"""sandboxd must install alone into sandbox images: only the stdlib, Starlette and uvicorn."""

from __future__ import annotations

import json
import subprocess
import sys

ALLOWED_THIRD_PARTY = {
    # starlette and uvicorn, and what they import themselves
    "starlette",
    "uvicorn",
    "anyio",
    "sniffio",
    "idna",
    "h11",
    "click",
    "typing_extensions",
    "exceptiongroup",
    "_typeshed",
    # starlette.formparsers imports python-multipart when it happens to be installed (the
    # workspace has it for the MCP server); sandboxd parses multipart itself and does not
    # need it (`nox -s build` installs the sandboxd wheel alone and imports it).
    "python_multipart",
    "multipart",
}

PROBE = """
import json, sys
before = set(sys.modules)
import kube_agent_sandbox.sandboxd.app, kube_agent_sandbox.sandboxd.cli
import kube_agent_sandbox.sandboxd.__main__  # noqa: F401 (main() is not called on import)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_daemon_imports_only_stdlib_starlette_and_uvicorn() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(result.stdout.strip().splitlines()[-1])
    top_level = {name.split(".")[0] for name in modules}
    ours = {name for name in modules if name.startswith("kube_agent_sandbox.")}
    foreign = top_level - set(sys.stdlib_module_names) - ALLOWED_THIRD_PARTY
    foreign -= {"kube_agent_sandbox"}
    assert not foreign, f"sandboxd imports non-stdlib modules: {sorted(foreign)}"
    assert all(name.startswith("kube_agent_sandbox.sandboxd") for name in ours)
    assert "kube_agent_sandbox.sandboxd.app" in ours
