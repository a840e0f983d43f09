"""The Python examples of the SDK docs compile and use only names the SDK exports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kube_agent_sandbox.sdk as sdk

DOCS = Path(__file__).resolve().parents[4] / "docs"
PAGES = ["guides/sdk.md", "guides/migrating-from-k8s-agent-sandbox.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, code in enumerate(BLOCK.findall((DOCS / page).read_text())):
            found.append((f"{page}#{index}", code))
    return found


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_example_compiles_and_imports_exist(where: str, code: str) -> None:
    tree = ast.parse(code, filename=where)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("kube_agent_sandbox.sdk")
        ):
            module = __import__(node.module, fromlist=["_"])
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module}.{alias.name}"


def test_documented_client_calls_exist() -> None:
    text = (DOCS / "guides" / "sdk.md").read_text()
    for call in set(re.findall(r"client\.([a-z_]+)\(", text)):
        assert hasattr(sdk.SandboxClient, call), call
        assert hasattr(sdk.AsyncSandboxClient, call), call
