"""Render the E2B SDK compatibility table of docs/guides/gateway.md from its mapping file.

``scripts/e2b_compatibility.yaml`` says, per public method of the E2B SDKs, what the gateway
does with it. This script renders it between the ``e2b-compatibility`` markers of the gateway
guide; ``--check`` exits 1 when the guide differs (``nox -s check-generated`` runs it), and
``--surface`` prints the installed Python SDK's public methods, grouped as the mapping groups
them. The unit test ``packages/gateway/tests/unit/test_e2b_compatibility.py`` fails when the
installed Python SDK has a method the mapping does not list (or the mapping a method it does
not have); ``test_e2b_javascript.py`` does the same for the JavaScript packages it installs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MAPPING = ROOT / "scripts" / "e2b_compatibility.yaml"
GUIDE = ROOT / "docs" / "guides" / "gateway.md"
BEGIN = "<!-- e2b-compatibility:begin (scripts/e2b_compatibility.py renders this table) -->"
END = "<!-- e2b-compatibility:end -->"
STATUSES = ("supported", "partly", "not supported")
SDKS = ("python", "js")
#: Attributes of ``e2b.Sandbox`` whose class is a surface of its own.
SUB_SURFACES = ("commands", "files", "pty", "git")


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def python_surface() -> dict[str, set[str]]:
    """The installed Python SDK's public names: ``Sandbox``, its sub-surfaces (the classes of
    ``commands``, ``files``, ``pty``, ``git``) and what ``e2b_code_interpreter.Sandbox`` adds."""
    import e2b
    import e2b_code_interpreter

    sandbox = e2b.Sandbox
    surface = {"Sandbox": _public(sandbox)}
    for name in SUB_SURFACES:
        prop = inspect.getattr_static(sandbox, name)
        cls = typing.get_type_hints(prop.fget)["return"]
        surface[name] = _public(cls)
    surface["code-interpreter"] = _public(e2b_code_interpreter.Sandbox) - surface["Sandbox"]
    return surface


def snake(name: str) -> str:
    """``runCode`` -> ``run_code`` (the mapping's spelling of a JavaScript name)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def camel(name: str) -> str:
    """``run_code`` -> ``runCode``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def load(path: Path = MAPPING) -> dict[str, Any]:
    """The mapping file, checked: known statuses, a reason and a plan for every gap.

    Raises:
        ValueError: naming the first bad entry.
    """
    mapping: dict[str, Any] = yaml.safe_load(path.read_text())
    for surface in mapping["surfaces"]:
        for method, entry in surface["methods"].items():
            where = f"{surface['name']}.{method}"
            if entry.get("status") not in STATUSES:
                raise ValueError(f"{where}: status must be one of {STATUSES}")
            if entry.get("only", SDKS[0]) not in SDKS:
                raise ValueError(f"{where}: only must be one of {SDKS}")
            if entry["status"] == "not supported" and not (
                entry.get("reason") and entry.get("plan")
            ):
                raise ValueError(f"{where}: a method not supported needs a reason and a plan")
    return mapping


def expected(mapping: dict[str, Any], sdk: str, *, older: bool = False) -> dict[str, set[str]]:
    """Per SDK group, the names (snake_case) the mapping says ``sdk`` has: its newest release
    has them, or, with ``older``, only older releases do (``older: true`` entries)."""
    groups: dict[str, set[str]] = {}
    for surface in mapping["surfaces"]:
        names = groups.setdefault(surface["sdk"], set())
        for method, entry in surface["methods"].items():
            if entry.get("only", sdk) == sdk and bool(entry.get("older")) == older:
                names.add(method)
    return groups


def differences(mapping: dict[str, Any], sdk: str, surface: dict[str, set[str]]) -> list[str]:
    """What an installed SDK's ``surface`` (snake_case names per group) and the mapping
    disagree on: one line each; empty when they agree."""
    listed = expected(mapping, sdk)
    retired = expected(mapping, sdk, older=True)
    internal = {
        group: set(names) for group, names in (mapping.get(f"{sdk}_internal") or {}).items()
    }
    problems = []
    for group in sorted(set(listed) | set(surface)):
        have = surface.get(group, set()) - internal.get(group, set())
        want = listed.get(group, set())
        known = want | retired.get(group, set())
        problems += [
            f"{sdk} {group}.{name}: in the SDK, not in the mapping" for name in sorted(have - known)
        ]
        problems += [
            f"{sdk} {group}.{name}: in the mapping, not in the SDK" for name in sorted(want - have)
        ]
    return problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(mapping: dict[str, Any]) -> str:
    """The table (markdown), one row per method of the newest releases."""
    lines = [
        "| Surface | Python | JavaScript | Status | Notes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for surface in mapping["surfaces"]:
        for method, entry in surface["methods"].items():
            if entry.get("older"):
                continue
            only = entry.get("only")
            python = f"`{method}`" if only in (None, "python") else "—"
            js = f"`{camel(method)}`" if only in (None, "js") else "—"
            if entry["status"] == "not supported":
                plan = entry["plan"]
                plan = f"issue {plan}" if isinstance(plan, int) else plan
                notes = f"{entry['reason']}. Plan: {plan}."
            else:
                notes = entry.get("note", "")
            row = [surface["name"], python, js, entry["status"], _cell(notes)]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def updated_guide(guide: str, table: str) -> str:
    """The guide with the table between the markers.

    Raises:
        ValueError: if the markers are missing.
    """
    start, end = guide.find(BEGIN), guide.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{GUIDE} lacks the markers {BEGIN!r} ... {END!r}")
    return guide[: start + len(BEGIN)] + "\n\n" + table + "\n" + guide[end:]


def main(argv: list[str] | None = None) -> int:
    """Render (or ``--check``) the table, or print the Python ``--surface``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the guide is stale")
    parser.add_argument("--surface", action="store_true", help="print the Python SDK's names")
    args = parser.parse_args(argv)
    if args.surface:
        print(json.dumps({k: sorted(v) for k, v in python_surface().items()}, indent=1))
        return 0
    guide = GUIDE.read_text()
    new = updated_guide(guide, render(load()))
    if args.check:
        if new != guide:
            print(f"{GUIDE} is stale: run python scripts/e2b_compatibility.py", file=sys.stderr)
            return 1
        return 0
    GUIDE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
