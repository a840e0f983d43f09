"""Generate the sync SDK (``_sync``) from the async source (``_async``), as httpx/httpcore do.

Usage: ``python scripts/unasync_sdk.py`` rewrites the generated files;
``python scripts/unasync_sdk.py --check`` exits 1 when they differ from what would be generated
(``nox -s check-generated`` runs it). ``_backend.py`` is hand-written on both sides (the only
code that cannot be token-rewritten: threads vs the event loop) and is not generated.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
SDK = ROOT / "packages" / "sdk" / "src" / "kube_agent_sandbox" / "sdk"
TESTS = ROOT / "packages" / "sdk" / "tests" / "integration"
# (async source folder, generated sync folder); _backend.py and __init__.py are hand-written.
PAIRS = [(SDK / "_async", SDK / "_sync"), (TESTS / "_async", TESTS / "_sync")]
HAND_WRITTEN = {"__init__.py", "_backend.py"}

REPLACEMENTS = {
    "_async": "_sync",
    "AsyncSandboxClient": "SandboxClient",
    "AsyncObjectCalls": "ObjectCalls",
    "AsyncSandboxCalls": "SandboxCalls",
    "AsyncClaimCalls": "ClaimCalls",
    "AsyncSnapshotCalls": "SnapshotCalls",
    "AsyncExecCalls": "ExecCalls",
    "AsyncFileCalls": "FileCalls",
    "AsyncSandbox": "Sandbox",
    "AsyncKubeApi": "KubeApi",
    "AsyncExecSession": "ExecSession",
    "AsyncCommandExecutor": "CommandExecutor",
    "AsyncFilesystem": "Filesystem",
    "AsyncWebSocketSession": "WebSocketSession",
    "AsyncClient": "Client",
    "aconnect_ws": "connect_ws",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "aiter_bytes": "iter_bytes",
}

# Prose in docstrings is not tokenized by unasync: these phrases are rewritten after it.
DOC_REPLACEMENTS = [
    ("AsyncSandboxClient", "SandboxClient"),
    ("``async with ", "``with "),
    ("for asyncio programs", "for blocking (synchronous) programs"),
    (", off the event loop)", ")"),
]

HEADER = "# Generated from _async/{name} by scripts/unasync_sdk.py: do not edit.\n"


def generate(source_dir: Path, target: Path) -> list[Path]:
    """Write the sync twins of ``source_dir``'s modules under ``target``; return their paths."""
    sources = sorted(p for p in source_dir.glob("*.py") if p.name not in HAND_WRITTEN)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "_async"
        dst = Path(tmp) / "_sync"
        src.mkdir()
        for path in sources:
            (src / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        rule = unasync.Rule(
            fromdir=str(src) + "/", todir=str(dst) + "/", additional_replacements=REPLACEMENTS
        )
        unasync.unasync_files([str(src / p.name) for p in sources], rules=[rule])
        written = []
        for path in sources:
            text = (dst / path.name).read_text(encoding="utf-8")
            for old, new in DOC_REPLACEMENTS:
                text = text.replace(old, new)
            out = target / path.name
            out.write_text(HEADER.format(name=path.name) + text, encoding="utf-8")
            written.append(out)
    ruff = [sys.executable, "-m", "ruff"]
    files = [str(p) for p in written]
    subprocess.run([*ruff, "check", "--fix-only", "--unsafe-fixes", "--quiet", *files], check=True)
    subprocess.run([*ruff, "format", "--quiet", *files], check=True)
    return written


def main(argv: list[str] | None = None) -> int:
    """Generate, or with ``--check`` compare."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the sync copy is stale")
    args = parser.parse_args(argv)
    if not args.check:
        for source_dir, sync_dir in PAIRS:
            for path in generate(source_dir, sync_dir):
                print(f"wrote {path.relative_to(ROOT)}")
        return 0
    stale = []
    for source_dir, sync_dir in PAIRS:
        with tempfile.TemporaryDirectory() as tmp:
            for path in generate(source_dir, Path(tmp)):
                current = sync_dir / path.name
                if not current.is_file() or current.read_text() != path.read_text():
                    stale.append(str(current.relative_to(ROOT)))
    if stale:
        print("stale generated sync SDK: " + ", ".join(stale), file=sys.stderr)
        print("run: nox -s generate (or python scripts/unasync_sdk.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
