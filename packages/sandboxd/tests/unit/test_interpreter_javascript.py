"""JavaScript and TypeScript contexts: a real ``node`` driven through the worker (no HTTP).

A missing ``node`` skips locally and fails under ``CI=true`` (``scripts/setup.sh`` installs it).
The TypeScript tests use the ``typescript`` npm package, installed once into
``~/.cache/agent-sandbox/`` (a missing npm or registry skips locally, fails under CI).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kube_agent_sandbox.sandboxd.interpreter import worker as worker_module
from kube_agent_sandbox.sandboxd.interpreter.app import build_app
from kube_agent_sandbox.sandboxd.interpreter.config import InterpreterOptions
from kube_agent_sandbox.sandboxd.interpreter.contexts import ContextRegistry
from kube_agent_sandbox.sandboxd.interpreter.events import Event
from kube_agent_sandbox.sandboxd.interpreter.javascript import JavaScriptWorker, NodeMissingError
from kube_agent_sandbox.sandboxd.interpreter.worker import WorkerSettings
from kube_agent_sandbox.testing.npm import CACHE, npm_package
from kube_agent_sandbox.testing.plugin import unavailable

TYPESCRIPT = "5.9.3"
TS_CACHE = CACHE / f"typescript-{TYPESCRIPT}"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        unavailable("Node.js is needed for JavaScript contexts (scripts/setup.sh installs it)")
    return node


@pytest.fixture
async def js(tmp_path: Path) -> AsyncIterator[JavaScriptWorker]:
    """A started JavaScript context in a fresh directory."""
    _node()
    worker = JavaScriptWorker(cwd=str(tmp_path))
    await worker.start()
    try:
        yield worker
    finally:
        await worker.close()


@pytest.fixture(scope="module")
def typescript_modules() -> Path:
    """A ``node_modules`` folder holding the pinned ``typescript`` package (npm, on first use)."""
    return npm_package(TS_CACHE, "typescript", TYPESCRIPT) / "node_modules"


@pytest.fixture
async def ts(tmp_path: Path, typescript_modules: Path) -> AsyncIterator[JavaScriptWorker]:
    """A started TypeScript context whose ``typescript`` package comes from ``NODE_PATH``."""
    settings = WorkerSettings(env={"NODE_PATH": str(typescript_modules)})
    worker = JavaScriptWorker(cwd=str(tmp_path), language="typescript", settings=settings)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.close()


async def _run(
    runner: JavaScriptWorker,
    code: str,
    *,
    env: dict[str, str] | None = None,
    time_limit: float | None = None,
) -> list[Event]:
    return [e async for e in runner.execute(code, env=env, time_limit=time_limit)]


def _plain(found: list[Event]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "timestamp"} for e in found]


def _errors(found: list[Event]) -> list[Event]:
    return [e for e in found if e["type"] == "error"]


def _text(found: list[Event]) -> str | None:
    results = [e for e in found if e["type"] == "result" and e["is_main_result"]]
    return results[-1]["text"] if results else None


async def test_output_result_and_state_across_cells(js: JavaScriptWorker) -> None:
    found = await _run(js, "let x = 40\nconsole.log('p')\nconsole.error('e')\nx + 2")
    assert _plain(found) == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "stdout", "text": "p\n"},
        {"type": "stderr", "text": "e\n"},
        {"type": "result", "text": "42", "is_main_result": True},
    ]
    assert _text(await _run(js, "x * 2")) == "80"
    assert _text(await _run(js, "let x = 1; x")) == "1"  # declared again (REPL mode)
    assert _text(await _run(js, "function f() { return x + 1 }\nclass K {}\nf()")) == "2"
    assert _text(await _run(js, "typeof K")) == "function"
    assert _text(await _run(js, "'a string'")) == "a string"
    assert _text(await _run(js, "({a: [1, 2]})")) == "{ a: [ 1, 2 ] }"
    assert [e["type"] for e in await _run(js, "let y = 5")] == ["number_of_executions"]
    assert [e["type"] for e in await _run(js, "undefined")] == ["number_of_executions"]
    assert js.execution_count == 9


async def test_stdout_streams_while_the_cell_awaits(js: JavaScriptWorker) -> None:
    started = time.monotonic()
    arrivals: list[tuple[float, Event]] = []
    code = (
        "for (let i = 0; i < 3; i++) {\n  console.log(i)\n"
        "  await new Promise((r) => setTimeout(r, 300))\n}\n'done'"
    )
    async for event in js.execute(code):
        arrivals.append((time.monotonic() - started, event))
    finished = time.monotonic() - started
    lines = [e["text"] for _, e in arrivals if e["type"] == "stdout"]
    assert lines == ["0\n", "1\n", "2\n"]
    first = next(at for at, e in arrivals if e["type"] == "stdout")
    assert first < finished - 0.4  # streamed, not buffered until the end
    assert arrivals[-1][1]["text"] == "done"


async def test_top_level_await_imports_require_and_child_output(
    js: JavaScriptWorker, tmp_path: Path
) -> None:
    (tmp_path / "helper.mjs").write_text("export const answer = 42;\nexport default 'dflt';\n")
    code = (
        "import os from 'node:os'\nimport { join as j } from 'node:path'\n"
        "import * as helper from './helper.mjs'\n"
        "const value = await Promise.resolve(helper.answer);\n"
        "`${typeof os.cpus} ${j('a', 'b')} ${value} ${helper.default}`"
    )
    assert _text(await _run(js, code)) == "function a/b 42 dflt"
    assert _text(await _run(js, "(await import('./helper.mjs')).answer + value")) == "84"
    child = await _run(
        js, "require('node:child_process').execSync('echo from child', {stdio: 'inherit'}); 1"
    )
    assert [e["text"] for e in child if e["type"] == "stdout"] == ["from child\n"]


async def test_errors_have_e2b_shape_and_keep_the_context(js: JavaScriptWorker) -> None:
    await _run(js, "const kept = 'yes'")
    found = await _run(js, "function f() {\n  throw new TypeError('bad thing')\n}\nf()")
    (error,) = _errors(found)
    assert error["name"] == "TypeError"
    assert error["value"] == "bad thing"
    assert error["traceback"].startswith("TypeError: bad thing\n    at f (")
    assert "driver.js" not in error["traceback"]
    assert "node:inspector" not in error["traceback"]
    (syntax,) = _errors(await _run(js, "let 3x = 1"))
    assert syntax["name"] == "SyntaxError"
    (thrown,) = _errors(await _run(js, "throw {code: 5}"))
    assert thrown["name"] == "Error"
    assert thrown["value"] == "{ code: 5 }"
    (rejected,) = _errors(await _run(js, "await Promise.reject(new RangeError('no'))"))
    assert (rejected["name"], rejected["value"]) == ("RangeError", "no")
    assert _text(await _run(js, "kept")) == "yes"


async def test_an_error_in_a_callback_is_reported_and_the_context_lives(
    js: JavaScriptWorker,
) -> None:
    await _run(js, "setTimeout(() => { throw new Error('later') }, 10)")
    found = await _run(js, "await new Promise((r) => setTimeout(r, 200)); 'alive'")
    assert "Uncaught Error: later" in "".join(e["text"] for e in found if e["type"] == "stderr")
    assert _text(found) == "alive"


async def test_env_vars_are_set_for_one_execution(js: JavaScriptWorker) -> None:
    assert _text(await _run(js, "process.env.ONLY_ONCE", env={"ONLY_ONCE": "v"})) == "v"
    assert _text(await _run(js, "String(process.env.ONLY_ONCE)")) == "undefined"


async def test_time_limit_interrupts_a_busy_loop_and_keeps_state(js: JavaScriptWorker) -> None:
    await _run(js, "let kept = 'yes'")
    started = time.monotonic()
    found = await _run(js, "console.log('start')\nwhile (true) {}", time_limit=0.5)
    assert time.monotonic() - started < 5
    assert [e["text"] for e in found if e["type"] == "stdout"] == ["start\n"]
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "interrupted" in error["value"]
    assert _text(await _run(js, "kept")) == "yes"


async def test_time_limit_interrupts_an_await_and_keeps_state(js: JavaScriptWorker) -> None:
    await _run(js, "let kept = 'still'")
    found = await _run(js, "await new Promise(() => {})", time_limit=0.5)
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "interrupted" in error["value"]
    assert _text(await _run(js, "kept")) == "still"


async def test_a_worker_that_ignores_the_interrupt_is_restarted(
    js: JavaScriptWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "INTERRUPT_GRACE_SECONDS", 0.5)
    # A busy loop in a microtask runs outside the interruptible evaluation.
    found = await _run(js, "globalThis.lost = 1\nawait null\nwhile (true) {}", time_limit=0.3)
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "restarted" in error["value"]
    assert _text(await _run(js, "typeof lost")) == "undefined"


async def test_an_abandoned_execution_is_interrupted_in_the_background(
    js: JavaScriptWorker,
) -> None:
    await _run(js, "let kept = 'still'")
    stream = js.execute("console.log('go')\nwhile (true) {}")
    async for event in stream:
        if event["type"] == "stdout":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    found = await asyncio.wait_for(_run(js, "kept"), 10)
    assert _text(found) == "still"


async def test_exit_and_restart_lose_state(js: JavaScriptWorker) -> None:
    await _run(js, "let lost = 1")
    (error,) = _errors(await _run(js, "process.exit(3)"))
    assert error["name"] == "ContextRestarting"
    assert "Node.js process exited (code 3)" in error["value"]
    assert _text(await _run(js, "typeof lost")) == "undefined"
    await _run(js, "let again = 1")
    await js.restart()
    assert _text(await _run(js, "typeof again")) == "undefined"
    assert js.execution_count == 1


async def test_display_sends_rich_results(js: JavaScriptWorker) -> None:
    code = (
        "display({[Symbol.for('Jupyter.display')]() {\n"
        "  return {'text/plain': 'bold', 'text/html': '<b>bold</b>'} }})\n1"
    )
    found = _plain(await _run(js, code))
    assert found[1] == {
        "type": "result",
        "text": "bold",
        "html": "<b>bold</b>",
        "is_main_result": False,
    }
    assert found[2]["text"] == "1"


async def test_typescript_types_are_stripped(ts: JavaScriptWorker) -> None:
    code = (
        "interface Point { x: number; y: number }\n"
        "enum Color { Red, Green }\n"
        "const p: Point = { x: 1, y: 2 }\n"
        "const total: number = await Promise.resolve(p.x + p.y + Color.Green)\n"
        "total"
    )
    assert _text(await _run(ts, code)) == "4"
    assert _text(await _run(ts, "const label = (n: number): string => `n=${n}`\nlabel(total)")) == (
        "n=4"
    )
    (error,) = _errors(await _run(ts, "const broken: = 1"))
    assert error["name"] == "SyntaxError"
    assert "TS1110" in error["value"]
    (thrown,) = _errors(await _run(ts, "function f(): never { throw new Error('ts boom') }\nf()"))
    assert (thrown["name"], thrown["value"]) == ("Error", "ts boom")


async def test_typescript_without_a_compiler_is_a_clear_error(tmp_path: Path) -> None:
    node = _node()
    probe = await asyncio.to_thread(
        subprocess.run,
        [
            node,
            "-e",
            "let ok = typeof require('node:module').stripTypeScriptTypes === 'function';"
            "try { require.resolve('typescript', {paths: ['/usr/lib/node_modules',"
            " '/usr/local/lib/node_modules']}); ok = true } catch {}; console.log(ok)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    if probe.stdout.strip() == "true":
        pytest.skip("this Node strips types itself or has a global typescript package")
    worker = JavaScriptWorker(cwd=str(tmp_path), language="typescript")
    await worker.start()
    try:
        (error,) = _errors(await _run(worker, "const a: number = 1"))
    finally:
        await worker.close()
    assert error["name"] == "TypeScriptUnavailable"
    assert "Node >= 22.13" in error["value"]
    assert "`typescript` npm package" in error["value"]


async def test_a_missing_node_is_a_clear_400(tmp_path: Path) -> None:
    settings = WorkerSettings(node=str(tmp_path / "no-node"))
    registry = ContextRegistry(default_cwd=str(tmp_path), settings=settings)
    with pytest.raises(NodeMissingError, match=r"need Node\.js"):
        await registry.create("javascript")
    assert registry.contexts == {}
    options = InterpreterOptions(default_cwd=str(tmp_path), envd_url="", node=settings.node)
    app = build_app(options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
            created = await client.post("/contexts", json={"language": "typescript"})
            assert created.status_code == 400
            assert "need Node.js" in created.text
            executed = await client.post("/execute", json={"code": "1", "language": "js"})
            assert executed.status_code == 400
            assert "need Node.js" in executed.text
            python = await client.post("/execute", json={"code": "1 + 1"})
            assert python.status_code == 200


async def test_contexts_over_http(tmp_path: Path) -> None:
    _node()
    options = InterpreterOptions(default_cwd=str(tmp_path), envd_url="")
    app = build_app(options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
            created = (await client.post("/contexts", json={"language": "javascript"})).json()
            assert created["language"] == "javascript"
            first = await client.post(
                "/execute", json={"code": "let n = 41", "context_id": created["id"]}
            )
            assert first.status_code == 200
            second = await client.post(
                "/execute", json={"code": "n + 1", "context_id": created["id"]}
            )
            lines = [json.loads(line) for line in second.text.splitlines()]
            assert {"type": "result", "text": "42", "is_main_result": True} in lines
            languages = sorted(c["language"] for c in (await client.get("/contexts")).json())
            assert languages == ["javascript", "python"]
            restarted = await client.post(f"/contexts/{created['id']}/restart")
            assert restarted.status_code == 200
            assert (await client.delete(f"/contexts/{created['id']}")).status_code == 200
