"""The sync SDK is generated from the async source and the generated copy is current."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from kube_agent_sandbox.sdk import AsyncSandbox, AsyncSandboxClient, Sandbox, SandboxClient

ROOT = Path(__file__).resolve().parents[4]


def test_generated_sync_copy_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync_sdk.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_sync_and_async_expose_the_same_public_calls() -> None:
    for async_cls, sync_cls in ((AsyncSandboxClient, SandboxClient), (AsyncSandbox, Sandbox)):
        async_names = {n for n in dir(async_cls) if not n.startswith("_")}
        sync_names = {n for n in dir(sync_cls) if not n.startswith("_")}
        assert async_names == sync_names
        for name in async_names & sync_names:
            a, s = getattr(async_cls, name), getattr(sync_cls, name)
            if callable(a) and not isinstance(a, type):
                assert list(inspect.signature(a).parameters) == list(
                    inspect.signature(s).parameters
                ), name
                if inspect.iscoroutinefunction(a):
                    assert not inspect.iscoroutinefunction(s), name
