"""Pinned npm packages for tests that drive a real Node.js client, installed once per version.

The tests that need one (the MCP TypeScript client, TypeScript in the code interpreter) skip
locally and fail under ``CI=true`` when Node, npm or the registry is missing
(:func:`kube_agent_sandbox.testing.plugin.unavailable`); ``scripts/setup.sh`` installs Node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from kube_agent_sandbox.testing.plugin import unavailable

__all__ = ["CACHE", "npm_package"]

CACHE = Path.home() / ".cache" / "agent-sandbox"
"""Where the installs live (one folder per package and version, kept between runs)."""


def npm_package(
    root: Path,
    package: str,
    version: str,
    *,
    module: bool = False,
    also: dict[str, str] | None = None,
) -> Path:
    """A folder whose ``node_modules`` holds ``package@version``, installed on first use.

    Args:
        root: The folder (emptied and reinstalled when a package is missing from it).
        package: The npm package name.
        version: The exact version.
        module: Mark the folder's ``package.json`` as ``"type": "module"`` (ES modules).
        also: More packages (name to exact version) installed with it in the same
            ``npm install``, e.g. a pinned version of one of its dependencies.

    Returns:
        ``root``.
    """
    if shutil.which("node") is None:
        unavailable("Node.js is needed (scripts/setup.sh installs it)")
    npm = shutil.which("npm")
    if npm is None:
        unavailable(f"npm is needed to install {package} (scripts/setup.sh installs it)")
    wanted = {package: version, **(also or {})}
    if all((root / "node_modules" / name / "package.json").is_file() for name in wanted):
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    manifest: dict[str, object] = {"private": True}
    if module:
        manifest["type"] = "module"
    (root / "package.json").write_text(json.dumps(manifest))
    result = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", *(f"{n}@{v}" for n, v in wanted.items())],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        specs = " ".join(f"{n}@{v}" for n, v in wanted.items())
        unavailable(f"npm could not install {specs}: {result.stderr[-2000:]}")
    return root
