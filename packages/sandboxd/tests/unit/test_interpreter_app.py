"""The HTTP surface in process: status codes, bad inputs, tokens, the NDJSON stream."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b_code_interpreter.models import Execution, parse_output
from starlette.applications import Starlette

from kube_agent_sandbox.sandboxd.interpreter.app import build_app
from kube_agent_sandbox.sandboxd.interpreter.config import InterpreterOptions

TOKEN = "t0ken-for-tests"


async def _client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
            yield client


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    options = InterpreterOptions(default_cwd=str(tmp_path), keepalive_seconds=0.1, envd_url="")
    async for c in _client(build_app(options)):
        yield c


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    options = InterpreterOptions(default_cwd=str(tmp_path), access_token=TOKEN, envd_url="")
    async for c in _client(build_app(options)):
        yield c


def _lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


async def test_health(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == "OK"


async def test_execute_stream_ends_and_the_sdk_parses_every_line(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/execute",
        json={"code": "import time\nprint('a')\ntime.sleep(0.35)\n1 + 1", "env_vars": None},
    )
    lines = _lines(response)
    assert lines[-1] == {"type": "end_of_execution"}
    assert {"type": "keepalive"} in lines  # the cell was silent for longer than the interval
    execution = Execution()
    for raw in response.text.splitlines():
        parse_output(execution, raw)
    assert execution.text == "2"
    assert execution.logs.stdout == ["a\n"]
    assert execution.execution_count == 1


async def test_default_python_context_exists_from_the_start(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    response = await client.get("/contexts")
    assert response.status_code == 200
    contexts = response.json()
    assert len(contexts) == 1
    assert contexts[0]["language"] == "python"
    assert contexts[0]["cwd"] == str(tmp_path)


async def test_context_lifecycle(client: httpx.AsyncClient, tmp_path: Path) -> None:
    created = (await client.post("/contexts", json={"language": "bash", "cwd": "/"})).json()
    assert created["language"] == "bash"
    assert created["cwd"] == "/"
    lines = _lines(await client.post("/execute", json={"code": "pwd", "context_id": created["id"]}))
    assert {"stdout"} <= {line["type"] for line in lines}
    assert [line["text"] for line in lines if line["type"] == "stdout"] == ["/\n"]
    restarted = await client.post(f"/contexts/{created['id']}/restart")
    assert restarted.status_code == 200
    assert restarted.json() is None
    removed = await client.delete(f"/contexts/{created['id']}")
    assert removed.status_code == 200
    assert created["id"] not in {c["id"] for c in (await client.get("/contexts")).json()}
    empty_body = await client.post("/contexts", content=b"")
    assert empty_body.json()["language"] == "python"
    assert empty_body.json()["cwd"] == str(tmp_path)


async def test_removing_the_default_context_makes_a_new_one_on_use(
    client: httpx.AsyncClient,
) -> None:
    (default,) = (await client.get("/contexts")).json()
    await client.post("/execute", json={"code": "marker = 1"})
    assert (await client.delete(f"/contexts/{default['id']}")).status_code == 200
    lines = _lines(await client.post("/execute", json={"code": "'marker' in globals()"}))
    assert [line["text"] for line in lines if line["type"] == "result"] == ["False"]
    assert default["id"] not in {c["id"] for c in (await client.get("/contexts")).json()}


async def test_language_executions_use_one_default_per_language(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(2):
        _lines(await client.post("/execute", json={"code": "true", "language": "bash"}))
    languages = sorted(c["language"] for c in (await client.get("/contexts")).json())
    assert languages == ["bash", "python"]


async def test_execute_time_limit_from_the_body(client: httpx.AsyncClient) -> None:
    lines = _lines(
        await client.post("/execute", json={"code": "import time\ntime.sleep(20)", "timeout": 0.3})
    )
    errors = [line for line in lines if line["type"] == "error"]
    assert [e["name"] for e in errors] == ["TimeoutError"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "not valid JSON"),
        (b"[1]", 400, "JSON object"),
        (b"", 400, "JSON object"),
        (b"{}", 400, "'code' must be a string"),
        (b'{"code": 1}', 400, "'code' must be a string"),
        (b'{"code": "1", "context_id": 5}', 400, "'context_id' must be a string"),
        (b'{"code": "1", "language": ["python"]}', 400, "'language' must be a string"),
        (b'{"code": "1", "env_vars": ["A=1"]}', 400, "'env_vars' must be an object"),
        (b'{"code": "1", "env_vars": {"A": 1}}', 400, "must be a string"),
        (b'{"code": "1", "env_vars": {"A=B": "1"}}', 400, "invalid name"),
        (b'{"code": "1", "env_vars": {"": "1"}}', 400, "invalid name"),
        (b'{"code": "1", "env_vars": {"A": "x\\u0000"}}', 400, "without NUL"),
        (b'{"code": "1", "timeout": "5"}', 400, "'timeout' must be a number"),
        (b'{"code": "1", "timeout": true}', 400, "'timeout' must be a number"),
        (b'{"code": "1", "timeout": -1}', 400, "must not be negative"),
        (
            b'{"code": "1", "context_id": "x", "language": "python"}',
            400,
            "Only one of context_id or language can be provided",
        ),
        (b'{"code": "1", "language": "cobol"}', 400, "'cobol' is not supported"),
        (b'{"code": "1", "context_id": "nope"}', 404, "Context nope not found"),
    ],
)
async def test_bad_execute_requests(
    client: httpx.AsyncClient, body: bytes, status: int, message: str
) -> None:
    response = await client.post(
        "/execute", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    assert message in response.text
    # The server keeps working after every bad request.
    assert _lines(await client.post("/execute", json={"code": "7"}))[-2]["text"] == "7"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{oops", "not valid JSON"),
        (b'"python"', "JSON object"),
        (b'{"language": 3}', "'language' must be a string"),
        (b'{"language": "java"}', "'java' is not supported"),
        (b'{"cwd": "/definitely/not/here"}', "is not a directory"),
    ],
)
async def test_bad_context_requests(client: httpx.AsyncClient, body: bytes, message: str) -> None:
    response = await client.post("/contexts", content=body)
    assert response.status_code == 400
    assert message in response.text


async def test_unknown_contexts_are_404(client: httpx.AsyncClient) -> None:
    for response in (
        await client.delete("/contexts/missing"),
        await client.post("/contexts/missing/restart"),
    ):
        assert response.status_code == 404
        assert response.text == "Context missing not found"


async def test_oversized_bodies_are_refused(tmp_path: Path) -> None:
    options = InterpreterOptions(default_cwd=str(tmp_path), max_body_bytes=100)
    async for client in _client(build_app(options)):
        response = await client.post("/execute", json={"code": "x" * 200})
        assert response.status_code == 413


async def test_wrong_methods(client: httpx.AsyncClient) -> None:
    assert (await client.get("/execute")).status_code == 405
    assert (await client.put("/contexts")).status_code == 405


async def test_access_token(guarded: httpx.AsyncClient) -> None:
    assert (await guarded.get("/health")).status_code == 200
    for headers in ({}, {"X-Access-Token": "wrong"}, {"E2B-Traffic-Access-Token": ""}):
        for request in (
            guarded.post("/execute", json={"code": "1"}, headers=headers),
            guarded.get("/contexts", headers=headers),
            guarded.post("/contexts", json={}, headers=headers),
            guarded.delete("/contexts/x", headers=headers),
            guarded.post("/contexts/x/restart", headers=headers),
        ):
            response = await request
            assert response.status_code == 401
            assert response.text == "Invalid or missing access token"
    ok = await guarded.post("/execute", json={"code": "1"}, headers={"X-Access-Token": TOKEN})
    assert _lines(ok)[-2]["text"] == "1"
    listed = await guarded.get("/contexts", headers={"E2B-Traffic-Access-Token": TOKEN})
    assert listed.status_code == 200


async def test_a_python_that_cannot_start_is_a_500(tmp_path: Path) -> None:
    options = InterpreterOptions(default_cwd=str(tmp_path), python="/nonexistent/python")
    app = build_app(options)
    transport = httpx.ASGITransport(app=app)  # no lifespan: the default context would fail
    async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
        for response in (
            await client.post("/contexts", json={}),
            await client.post("/execute", json={"code": "1"}),
        ):
            assert response.status_code == 500
            assert "cannot start /nonexistent/python" in response.text
        bash = await client.post("/execute", json={"code": "echo ok", "language": "bash"})
        assert _lines(bash)[1]["text"] == "ok\n"


class _FakeEnvd:
    """A tiny envd ``GET /envs`` on an ephemeral port, in a thread."""

    def __init__(self, *, body: bytes, status: int = 200, token: str | None = None) -> None:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("X-Access-Token")))
                if token is not None and self.headers.get("X-Access-Token") != token:
                    self.send_response(401)
                    self.end_headers()
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.requests: list[tuple[str, str | None]] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _FakeEnvd:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


async def _result_text(client: httpx.AsyncClient, body: dict[str, Any], **kw: Any) -> str | None:
    lines = _lines(await client.post("/execute", json=body, **kw))
    results = [line["text"] for line in lines if line["type"] == "result"]
    return results[0] if results else None


async def test_global_env_vars_come_from_envd_with_the_callers_token(tmp_path: Path) -> None:
    body = json.dumps({"GLOBAL_A": "one", "B=C": "dropped", "NUM": 5}).encode()
    with _FakeEnvd(body=body, token="tok") as envd:
        options = InterpreterOptions(default_cwd=str(tmp_path), envd_url=envd.url)
        async for client in _client(build_app(options)):
            headers = {"X-Access-Token": "tok"}
            code = "import os\nos.environ.get('GLOBAL_A'), os.environ.get('NUM')"
            assert await _result_text(client, {"code": code}, headers=headers) == "('one', None)"
            assert envd.requests == [("/envs", "tok")]
            # Per-execution env wins for that execution only; the global value stays.
            over = {"code": "os.environ['GLOBAL_A']", "env_vars": {"GLOBAL_A": "two"}}
            assert await _result_text(client, over) == "two"
            assert await _result_text(client, {"code": "os.environ['GLOBAL_A']"}) == "one"
            # A restarted worker gets the global env again; envd is asked once per context.
            (default,) = (await client.get("/contexts")).json()
            await client.post(f"/contexts/{default['id']}/restart")
            restarted = {"code": "import os\nos.environ.get('GLOBAL_A')"}
            assert await _result_text(client, restarted) == "one"
            shell = _lines(
                await client.post(
                    "/execute", json={"code": "echo $GLOBAL_A", "language": "bash"}, headers=headers
                )
            )
            assert [line["text"] for line in shell if line["type"] == "stdout"] == ["one\n"]
            assert len(envd.requests) == 2  # python default, then the bash default


@pytest.mark.parametrize(
    ("body", "status", "token"),
    [
        (b"{broken", 200, None),
        (b'["A"]', 200, None),
        (b'{"A": "1"}', 500, None),
        (b'{"A": "1"}', 200, "other-token"),  # envd refuses the caller's token
    ],
)
async def test_unusable_envd_answers_leave_the_env_alone(
    tmp_path: Path, body: bytes, status: int, token: str | None
) -> None:
    with _FakeEnvd(body=body, status=status, token=token) as envd:
        options = InterpreterOptions(default_cwd=str(tmp_path), envd_url=envd.url)
        async for client in _client(build_app(options)):
            code = {"code": "import os\nos.environ.get('A', 'unset')"}
            assert await _result_text(client, code) == "unset"
            assert len(envd.requests) == 1


async def test_no_envd_is_fine(tmp_path: Path) -> None:
    for url in ("", "http://127.0.0.1:9", "not a url"):
        options = InterpreterOptions(default_cwd=str(tmp_path), envd_url=url)
        async for client in _client(build_app(options)):
            assert await _result_text(client, {"code": "3"}) == "3"


async def test_the_number_of_contexts_is_capped(tmp_path: Path) -> None:
    options = InterpreterOptions(default_cwd=str(tmp_path), envd_url="", max_contexts=2)
    async for client in _client(build_app(options)):  # the python default is the first
        assert (await client.post("/contexts", json={"language": "sh"})).status_code == 200
        refused = await client.post("/contexts", json={})
        assert refused.status_code == 400
        assert "too many contexts (limit 2)" in refused.text
        bash = await client.post("/execute", json={"code": "true", "language": "bash"})
        assert bash.status_code == 400
        assert _lines(await client.post("/execute", json={"code": "1"}))[-2]["text"] == "1"


async def test_a_failing_runner_still_ends_the_stream_cleanly(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "number_of_executions", "execution_count": 1}
        raise RuntimeError("bug")

    app_state = client._transport.app.state.interpreter  # type: ignore[attr-defined]
    context = await app_state.registry.default()
    monkeypatch.setattr(context.runner, "execute", broken)
    lines = _lines(await client.post("/execute", json={"code": "1"}))
    assert lines[1] == {
        "type": "error",
        "name": "InternalError",
        "value": "RuntimeError: bug",
        "traceback": "",
    }
    assert lines[-1] == {"type": "end_of_execution"}
