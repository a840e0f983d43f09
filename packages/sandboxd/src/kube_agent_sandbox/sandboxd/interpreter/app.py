"""The HTTP surface ``e2b-code-interpreter`` calls on port 49999.

``POST /execute`` streams NDJSON while the code runs; ``/contexts`` creates, lists, removes and
restarts code contexts; ``GET /health`` answers ``"OK"``. Errors are plain text with the status
the SDK maps onto its exceptions (404 → ``NotFoundException``, others → ``SandboxException``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kube_agent_sandbox.sandboxd.interpreter import events
from kube_agent_sandbox.sandboxd.interpreter.config import InterpreterOptions
from kube_agent_sandbox.sandboxd.interpreter.contexts import (
    Context,
    ContextRegistry,
    TooManyContextsError,
    UnsupportedLanguageError,
)
from kube_agent_sandbox.sandboxd.interpreter.envd_env import fetch_global_env
from kube_agent_sandbox.sandboxd.interpreter.pipes import RunAs
from kube_agent_sandbox.sandboxd.interpreter.worker import (
    RuntimeMissingError,
    WorkerError,
    WorkerSettings,
)

logger = logging.getLogger(__name__)

TOKEN_HEADERS = ("x-access-token", "e2b-traffic-access-token")


class BadRequestError(Exception):
    """The request is malformed; the message says how."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def _json_body(request: Request, options: InterpreterOptions) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > options.max_body_bytes:
        raise BadRequestError(f"body larger than {options.max_body_bytes} bytes", status=413)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > options.max_body_bytes:
            raise BadRequestError(f"body larger than {options.max_body_bytes} bytes", status=413)
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequestError(f"body is not valid JSON: {exc}") from exc


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError(f"{key!r} must be a string or null")
    return value


def _env_vars(body: Mapping[str, Any]) -> dict[str, str]:
    value = body.get("env_vars")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequestError("'env_vars' must be an object of strings or null")
    env: dict[str, str] = {}
    for key, item in value.items():
        if not key or "=" in key or "\x00" in key:
            raise BadRequestError(f"'env_vars' has an invalid name {key!r}")
        if not isinstance(item, str) or "\x00" in item:
            raise BadRequestError(f"'env_vars' value of {key!r} must be a string without NUL")
        env[key] = item
    return env


def _timeout(body: Mapping[str, Any]) -> float | None:
    value = body.get("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequestError("'timeout' must be a number of seconds or null")
    if value < 0:
        raise BadRequestError("'timeout' must not be negative")
    return None if value == 0 else float(value)


class NdjsonStream:
    """An ASGI response that streams events as NDJSON and stops the producer on disconnect.

    Args:
        source: The events (closed early when the client goes away).
        keepalive_seconds: Interval of ``keepalive`` lines while the source is silent.
    """

    def __init__(self, source: AsyncIterator[events.Event], *, keepalive_seconds: float) -> None:
        self.source = source
        self.keepalive_seconds = keepalive_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serves the response.

        Args:
            scope: The ASGI scope.
            receive: The ASGI receive channel (watched for ``http.disconnect``).
            send: The ASGI send channel.
        """
        producer = asyncio.create_task(self._produce(send))
        watcher = asyncio.create_task(_wait_disconnect(receive))
        try:
            done, _ = await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if producer not in done:
                logger.info("client went away during an execution; interrupting it")
                producer.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await producer
        finally:
            watcher.cancel()
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _produce(self, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-ndjson")],
            }
        )
        iterator = self.source.__aiter__()
        try:
            while True:
                step = asyncio.ensure_future(iterator.__anext__())
                try:
                    while True:
                        done, _ = await asyncio.wait({step}, timeout=self.keepalive_seconds)
                        if done:
                            break
                        await send(_body(events.ndjson_line(events.KEEPALIVE)))
                    event = step.result()
                except StopAsyncIteration:
                    break
                except (WorkerError, OSError) as exc:
                    logger.error("execution failed: %s", exc)
                    await send(
                        _body(events.ndjson_line(events.error_event("ContextError", str(exc))))
                    )
                    break
                except Exception as exc:
                    # A bug here must still end the stream cleanly, with a line that says so.
                    logger.exception("execution stream failed")
                    line = events.error_event("InternalError", f"{type(exc).__name__}: {exc}")
                    await send(_body(events.ndjson_line(line)))
                    break
                finally:
                    if not step.done():
                        step.cancel()
                        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                            await step
                await send(_body(events.ndjson_line(event)))
            await send(_body(events.ndjson_line(events.END_OF_EXECUTION)))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await _close(iterator)


async def _close(iterator: AsyncIterator[events.Event]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


def _body(data: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": True}


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class InterpreterApp:
    """Request handlers over one context registry.

    Args:
        options: The server settings.
        registry: The contexts (built from the options when None).
    """

    def __init__(
        self, options: InterpreterOptions, registry: ContextRegistry | None = None
    ) -> None:
        self.options = options
        self.registry = registry or ContextRegistry(
            default_cwd=options.resolved_cwd(),
            settings=WorkerSettings(
                python=options.python,
                node=options.node,
                rscript=options.rscript,
                run_as=RunAs.lookup(options.user) if options.user else None,
            ),
            max_contexts=options.max_contexts,
        )

    def authorized(self, request: Request) -> bool:
        """Checks the access token, when one is configured.

        Args:
            request: The request.

        Returns:
            Whether the request may proceed.
        """
        expected = self.options.access_token
        if not expected:
            return True
        for header in TOKEN_HEADERS:
            given = request.headers.get(header)
            if given is not None and hmac.compare_digest(given.encode(), expected.encode()):
                return True
        return False

    async def health(self, request: Request) -> Response:
        """``GET /health``.

        Args:
            request: The request.

        Returns:
            ``"OK"``.
        """
        return JSONResponse("OK")

    async def execute(self, request: Request) -> Response | NdjsonStream:
        """``POST /execute {code, context_id?, language?, env_vars?, timeout?}``.

        Args:
            request: The request.

        Returns:
            The NDJSON stream, or a plain-text error.
        """
        body = await _json_body(request, self.options)
        if not isinstance(body, dict):
            raise BadRequestError("body must be a JSON object with 'code'")
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequestError("'code' must be a string")
        context_id = _optional_str(body, "context_id")
        language = _optional_str(body, "language")
        env = _env_vars(body)
        timeout = _timeout(body)
        if context_id and language:
            raise BadRequestError("Only one of context_id or language can be provided")
        context: Context | None
        if context_id:
            context = self.registry.get(context_id)
            if context is None:
                return PlainTextResponse(f"Context {context_id} not found", status_code=404)
        else:
            context = await self.registry.default(language)
        if not context.global_env_loaded:
            context.global_env_loaded = True
            token = request.headers.get("x-access-token")
            found = await fetch_global_env(self.options.envd_url, token)
            if found:
                context.runner.base_env = found
        stream = context.runner.execute(code, env=env, time_limit=timeout)
        return NdjsonStream(stream, keepalive_seconds=self.options.keepalive_seconds)

    async def create_context(self, request: Request) -> Response:
        """``POST /contexts {language?, cwd?}`` → ``{id, language, cwd}``.

        Args:
            request: The request.

        Returns:
            The new context.
        """
        body = await _json_body(request, self.options)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise BadRequestError("body must be a JSON object")
        language = _optional_str(body, "language")
        cwd = _optional_str(body, "cwd")
        if cwd is not None and not await asyncio.to_thread(os.path.isdir, cwd):
            raise BadRequestError(f"cwd {cwd!r} is not a directory")
        context = await self.registry.create(language, cwd)
        return JSONResponse(context.to_json())

    async def list_contexts(self, request: Request) -> Response:
        """``GET /contexts``.

        Args:
            request: The request.

        Returns:
            Every context.
        """
        return JSONResponse([c.to_json() for c in self.registry.contexts.values()])

    async def remove_context(self, request: Request) -> Response:
        """``DELETE /contexts/{id}``.

        Args:
            request: The request.

        Returns:
            ``null``, or 404.
        """
        context_id = request.path_params["context_id"]
        if not await self.registry.remove(context_id):
            return PlainTextResponse(f"Context {context_id} not found", status_code=404)
        return JSONResponse(None)

    async def restart_context(self, request: Request) -> Response:
        """``POST /contexts/{id}/restart``: a fresh process, variables and count reset.

        Args:
            request: The request.

        Returns:
            ``null``, or 404.
        """
        context_id = request.path_params["context_id"]
        context = self.registry.get(context_id)
        if context is None:
            return PlainTextResponse(f"Context {context_id} not found", status_code=404)
        await context.runner.restart()
        return JSONResponse(None)


def build_app(options: InterpreterOptions, *, registry: ContextRegistry | None = None) -> Starlette:
    """Builds the ASGI app; its lifespan starts the default python context and stops all.

    Args:
        options: The server settings.
        registry: The contexts (built from the options when None).

    Returns:
        The app.
    """
    handlers = InterpreterApp(options, registry)

    def guarded(handler: Any) -> Any:
        async def endpoint(request: Request) -> Any:
            if not handlers.authorized(request):
                return PlainTextResponse("Invalid or missing access token", status_code=401)
            try:
                return await handler(request)
            except BadRequestError as exc:
                return PlainTextResponse(str(exc), status_code=exc.status)
            except (UnsupportedLanguageError, TooManyContextsError) as exc:
                return PlainTextResponse(str(exc), status_code=400)
            except RuntimeMissingError as exc:  # e.g. a JavaScript context without Node.js, R
                return PlainTextResponse(str(exc), status_code=400)
            except (WorkerError, TimeoutError, OSError) as exc:
                logger.error("context could not be started: %s", exc)
                return PlainTextResponse(f"Failed to start the context: {exc}", status_code=500)

        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await handlers.registry.default()
        try:
            yield
        finally:
            await handlers.registry.close()

    routes = [
        Route("/health", handlers.health, methods=["GET"]),
        Route("/execute", guarded(handlers.execute), methods=["POST"]),
        Route("/contexts", guarded(handlers.create_context), methods=["POST"]),
        Route("/contexts", guarded(handlers.list_contexts), methods=["GET"]),
        Route("/contexts/{context_id}", guarded(handlers.remove_context), methods=["DELETE"]),
        Route(
            "/contexts/{context_id}/restart", guarded(handlers.restart_context), methods=["POST"]
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.interpreter = handlers
    return app
