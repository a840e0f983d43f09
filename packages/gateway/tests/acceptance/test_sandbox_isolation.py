"""Acceptance: two sandboxes share neither files nor processes (issue 21).

Every sandbox pod of the suite has a daemon and a home of its own
(:class:`~kube_agent_sandbox.testing.pod_daemons.PodDaemons`), as a real pod has its own
envd and filesystem. With one daemon shared by all pods this fails: the second sandbox's
``/init`` is refused, and its files and processes would be the first one's. Driven with the
workspace's (newest) E2B SDK, configured as users configure it.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from e2b import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def two_sandboxes(gateway_stack: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sandbox]]:
    for name, value in (
        ("E2B_API_URL", gateway_stack.url),
        ("E2B_SANDBOX_URL", gateway_stack.url),
        ("E2B_API_KEY", gateway_stack.api_key),
        ("NO_PROXY", "127.0.0.1,localhost"),
    ):
        monkeypatch.setenv(name, value)
    created: list[Sandbox] = []
    try:
        # The warm member and then a cold pod: both paths get their own daemon.
        for _ in range(2):
            created.append(Sandbox.create("base", timeout=120, metadata={"suite": "isolation"}))
        yield created
    finally:
        # Together: each kill waits for its sandbox to be gone.
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda sandbox: sandbox.kill(), created))


def test_two_sandboxes_share_neither_files_nor_processes(two_sandboxes: list[Sandbox]) -> None:
    first, second = two_sandboxes
    homes = [sandbox.commands.run("pwd").stdout.strip() for sandbox in two_sandboxes]
    assert homes[0] != homes[1], homes
    # Relative paths are under each sandbox's home: one name, two files.
    first.files.write("mine.txt", "first\n")
    second.files.write("mine.txt", "second\n")
    assert first.files.read("mine.txt") == "first\n"
    assert second.files.read("mine.txt") == "second\n"
    first.files.write("only-first.txt", "x")
    assert first.files.exists("only-first.txt")
    assert not second.files.exists("only-first.txt")
    assert "only-first.txt" not in {entry.name for entry in second.files.list(".")}

    sleeper = first.commands.run("sleep 300", background=True)
    assert sleeper.pid in {process.pid for process in first.commands.list()}
    assert sleeper.pid not in {process.pid for process in second.commands.list()}
    assert second.commands.kill(sleeper.pid) is False
    # ...and the first sandbox's process still runs: the second one could not touch it.
    assert sleeper.pid in {process.pid for process in first.commands.list()}
    assert first.commands.kill(sleeper.pid) is True
