"""The E2B compatibility table (docs/guides/gateway.md) lists the installed Python SDK exactly.

``scripts/e2b_compatibility.yaml`` maps every public method of the SDK to what the gateway does
with it; this fails when the workspace's ``e2b`` (or ``e2b-code-interpreter``) gains a method the
mapping does not list, or loses one it lists, so the table cannot silently rot. The JavaScript
packages are checked where the acceptance suite installs them (``test_e2b_javascript.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.testing.scripts import load_script


@pytest.fixture(scope="module")
def compat() -> Any:
    return load_script("e2b_compatibility")


def test_every_python_sdk_method_is_in_the_mapping(compat: Any) -> None:
    problems = compat.differences(compat.load(), "python", compat.python_surface())
    assert problems == [], "\n".join(problems)


def test_a_new_sdk_method_is_reported(compat: Any) -> None:
    surface = compat.python_surface()
    surface["files"].add("teleport")
    surface["commands"].discard("run")
    assert compat.differences(compat.load(), "python", surface) == [
        "python commands.run: in the mapping, not in the SDK",
        "python files.teleport: in the SDK, not in the mapping",
    ]


def test_the_guide_holds_the_rendered_table(compat: Any) -> None:
    table = compat.render(compat.load())
    assert table in compat.GUIDE.read_text()
    assert "| snapshot | `create_snapshot` | `createSnapshot` | partly |" in table
    assert "| snapshot | `fork` | `fork` | partly |" in table


def test_js_names_are_mapped_in_snake_case(compat: Any) -> None:
    assert compat.snake("runCode") == "run_code"
    assert compat.snake("getMcpURL") == "get_mcp_url"
    assert compat.camel("create_code_context") == "createCodeContext"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"status": "maybe"}, "status must be one of"),
        ({"status": "supported", "only": "go"}, "only must be one of"),
        ({"status": "not supported", "reason": "later"}, "needs a reason and a plan"),
    ],
)
def test_a_bad_mapping_entry_is_refused(
    compat: Any, tmp_path: Path, entry: dict[str, str], message: str
) -> None:
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("surfaces: [{name: S, sdk: Sandbox, methods: {m: " + _flow(entry) + "}}]\n")
    with pytest.raises(ValueError, match=message):
        compat.load(mapping)


def _flow(entry: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}"


def test_a_plan_is_an_issue_number_or_a_sentence(compat: Any) -> None:
    mapping = {
        "surfaces": [
            {
                "name": "S",
                "methods": {
                    "a": {"status": "not supported", "reason": "why", "plan": 20},
                    "b": {"status": "not supported", "reason": "why", "plan": "use `/x`"},
                },
            }
        ]
    }
    rows = compat.render(mapping).splitlines()[2:]
    assert rows == [
        "| S | `a` | `a` | not supported | why. Plan: issue 20. |",
        "| S | `b` | `b` | not supported | why. Plan: use `/x`. |",
    ]
