"""Code contexts: their ids, languages and working directories, and the default per language.

A context is what ``create_code_context`` returns and ``run_code(context=...)`` names. Python,
JavaScript, TypeScript and R contexts are persistent worker processes (JavaScript and TypeScript
run in Node.js, R in ``Rscript``, started only when such a context is first used); bash and sh
contexts run a shell per execution. An
execution that names a language (or nothing, meaning python) runs in that language's default
context, created on first use; the python default exists from the start.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from kube_agent_sandbox.sandboxd.interpreter import events
from kube_agent_sandbox.sandboxd.interpreter.shell import ShellRunner
from kube_agent_sandbox.sandboxd.interpreter.worker import PythonWorker, WorkerSettings

logger = logging.getLogger(__name__)

PYTHON = "python"
JAVASCRIPT = "javascript"
TYPESCRIPT = "typescript"
R = "r"
SHELLS = {"bash": "bash", "sh": "sh"}
_ALIASES = {
    "python3": PYTHON,
    "py": PYTHON,
    "shell": "bash",
    "js": JAVASCRIPT,
    "node": JAVASCRIPT,
    "nodejs": JAVASCRIPT,
    "ts": TYPESCRIPT,
    "rscript": R,
}
SUPPORTED_LANGUAGES = (PYTHON, JAVASCRIPT, TYPESCRIPT, R, *SHELLS)


DEFAULT_MAX_CONTEXTS = 64


class UnsupportedLanguageError(ValueError):
    """The requested language has no runner here."""


class TooManyContextsError(ValueError):
    """The server already holds its maximum number of contexts."""


class Runner(Protocol):
    """What a context runs code with."""

    execution_count: int
    base_env: dict[str, str]

    async def start(self) -> None:
        """Prepares the runner."""

    async def restart(self) -> None:
        """Starts over (variables and execution count are lost)."""

    async def close(self) -> None:
        """Releases the runner's processes."""

    def execute(
        self,
        code: str,
        *,
        env: Mapping[str, str] | None = None,
        time_limit: float | None = None,
    ) -> AsyncIterator[events.Event]:
        """Runs code and yields its events."""


def normalize_language(language: str | None) -> str:
    """Maps a requested language onto a supported one.

    Args:
        language: The language as the client sent it (None or empty means python).

    Returns:
        ``"python"``, ``"javascript"``, ``"typescript"``, ``"r"``, ``"bash"`` or ``"sh"``
        (case does not matter: ``"R"`` is ``"r"``).

    Raises:
        UnsupportedLanguageError: Any other language.
    """
    if not language:
        return PYTHON
    name = language.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in SUPPORTED_LANGUAGES:
        raise UnsupportedLanguageError(
            f"language {language!r} is not supported by this code interpreter "
            f"(supported: {', '.join(SUPPORTED_LANGUAGES)})"
        )
    return name


@dataclass
class Context:
    """One code context.

    Attributes:
        id: The context id.
        language: Its language.
        cwd: Its working directory.
        runner: What runs its code.
        global_env_loaded: Whether envd's global env vars were fetched for it.
    """

    id: str
    language: str
    cwd: str
    runner: Runner
    global_env_loaded: bool = False

    def to_json(self) -> dict[str, str]:
        """Returns the wire form ``{id, language, cwd}``.

        Returns:
            The mapping.
        """
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class ContextRegistry:
    """All contexts of the server, and the default context of each language.

    Args:
        default_cwd: The working directory of contexts created without one.
        settings: How Python workers are started.
        max_contexts: How many contexts may exist at once (each Python one is a process).
    """

    def __init__(
        self,
        *,
        default_cwd: str,
        settings: WorkerSettings | None = None,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
    ) -> None:
        self.default_cwd = default_cwd
        self.settings = settings or WorkerSettings()
        self.max_contexts = max_contexts
        self.contexts: dict[str, Context] = {}
        self.defaults: dict[str, str] = {}
        self._default_lock = asyncio.Lock()

    async def create(self, language: str | None = None, cwd: str | None = None) -> Context:
        """Creates and starts a context.

        Args:
            language: The language (None means python).
            cwd: The working directory (None means the default).

        Returns:
            The started context.

        Raises:
            UnsupportedLanguageError: The language is not supported.
            TooManyContextsError: ``max_contexts`` contexts exist already.
            WorkerError: The context's process could not start (``NodeMissingError``: a
                JavaScript or TypeScript context without Node.js, ``RMissingError``: an R
                context without R).
        """
        name = normalize_language(language)
        if len(self.contexts) >= self.max_contexts:
            raise TooManyContextsError(
                f"too many contexts (limit {self.max_contexts}); "
                "remove one with DELETE /contexts/{id} first"
            )
        directory = cwd or self.default_cwd
        runner: Runner
        if name == PYTHON:
            runner = PythonWorker(cwd=directory, settings=self.settings)
        elif name in (JAVASCRIPT, TYPESCRIPT):
            from kube_agent_sandbox.sandboxd.interpreter.javascript import JavaScriptWorker

            runner = JavaScriptWorker(cwd=directory, language=name, settings=self.settings)
        elif name == R:
            from kube_agent_sandbox.sandboxd.interpreter.r_worker import RWorker

            runner = RWorker(cwd=directory, settings=self.settings)
        else:
            runner = ShellRunner(shell=SHELLS[name], cwd=directory, run_as=self.settings.run_as)
        await runner.start()
        context = Context(id=str(uuid.uuid4()), language=name, cwd=directory, runner=runner)
        self.contexts[context.id] = context
        logger.info("created %s context %s in %s", name, context.id, directory)
        return context

    async def default(self, language: str | None = None) -> Context:
        """Returns the default context of a language, creating it on first use.

        Args:
            language: The language (None means python).

        Returns:
            The context.
        """
        name = normalize_language(language)
        async with self._default_lock:
            context_id = self.defaults.get(name)
            context = self.contexts.get(context_id) if context_id else None
            if context is None:
                context = await self.create(name)
                self.defaults[name] = context.id
            return context

    def get(self, context_id: str) -> Context | None:
        """Looks a context up.

        Args:
            context_id: The id.

        Returns:
            The context, or None.
        """
        return self.contexts.get(context_id)

    async def remove(self, context_id: str) -> bool:
        """Stops and forgets a context.

        Args:
            context_id: The id.

        Returns:
            Whether the context existed.
        """
        context = self.contexts.pop(context_id, None)
        if context is None:
            return False
        for language, default_id in list(self.defaults.items()):
            if default_id == context_id:
                del self.defaults[language]
        await context.runner.close()
        logger.info("removed context %s", context_id)
        return True

    async def close(self) -> None:
        """Stops every context."""
        contexts = list(self.contexts.values())
        self.contexts.clear()
        self.defaults.clear()
        await asyncio.gather(*(c.runner.close() for c in contexts), return_exceptions=True)
