"""The REPL driver that runs inside each Python context's worker process.

The interpreter server starts one ``python3 -u driver.py EVENT_FD`` child per context. The child
keeps the user's globals between executions, the way a Jupyter kernel does, without Jupyter:

* commands arrive as frames on a private duplicate of fd 0 (fd 0 itself becomes /dev/null, so
  ``input()`` in user code cannot eat a command);
* events (ready, execution count, results, errors, done) leave as frames on ``EVENT_FD``;
* user output goes to the real fds 1 and 2 (line buffered), so output of child processes
  (``os.system``, ``subprocess.run``) streams exactly like ``print``. Before each event the
  driver writes a numbered sync marker (``SYNC_START + token-seq + SYNC_END``) to fds 1 and 2 and
  puts the number in the event, so the server can order output and events as they happened and
  knows when it has all output of an execution.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. This module uses
the standard library only, because it runs under whatever ``python3`` the sandbox image has and is
started as a script (it does not import the rest of the package). Matplotlib figures become PNG and
chart results through ``figures.py`` next to it, loaded from its file only once user code imports
``matplotlib.pyplot`` (an import hook on that one module) or shows a ``Figure``.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import io
import json
import linecache
import os
import signal
import struct
import sys
import traceback
import types
from typing import Any

_HEADER = struct.Struct(">I")
FIGURES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures.py")
PYPLOT = "matplotlib.pyplot"
MAX_FRAME = 64 * 1024 * 1024
SYNC_START = b"\x00\x1fE2B-SYNC-"
SYNC_END = b"\x1f\x00"
MAX_SEQ_DIGITS = 20
CO_COROUTINE = 0x80  # inspect.CO_COROUTINE; asyncio and inspect load only when a cell awaits
MAX_FIELD_CHARS = 4 * 1024 * 1024  # escaped at most 6-fold: a cut field fits in a frame

# MIME bundle keys that map onto the named fields of an E2B ``Result`` (the rest go to ``extra``).
_REPR_METHODS = (
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_pdf_", "pdf"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
)


def encode_frame(message: dict[str, Any]) -> bytes:
    """Encodes one message as a length-prefixed JSON frame.

    Args:
        message: A JSON-serialisable mapping.

    Returns:
        The frame bytes.
    """
    body = json.dumps(message, separators=(",", ":"), default=repr).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def _fit(message: dict[str, Any]) -> dict[str, Any]:
    """Shrinks a message whose frame would exceed ``MAX_FRAME``: long strings are cut, other
    large values dropped (the server refuses oversized frames)."""
    fitted: dict[str, Any] = {}
    for key, value in message.items():
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            cut = len(value) - MAX_FIELD_CHARS
            fitted[key] = value[:MAX_FIELD_CHARS] + f"\n[... {cut} characters cut]"
        elif isinstance(value, dict | list) and len(encode_frame({key: value})) > MAX_FRAME // 4:
            continue
        else:
            fitted[key] = value
    return fitted


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        try:
            chunk = os.read(fd, remaining)
        except InterruptedError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict[str, Any] | None:
    """Reads one frame from a blocking file descriptor.

    Args:
        fd: The descriptor to read from.

    Returns:
        The decoded message, or None at end of file.

    Raises:
        ValueError: The frame is larger than ``MAX_FRAME`` or not a JSON object.
    """
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds the limit of {MAX_FRAME}")
    body = _read_exact(fd, size)
    if body is None:
        return None
    message = json.loads(body.decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("a frame must hold a JSON object")
    return message


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


def _strip_quotes(text: str) -> str:
    # Jupyter's E2B server shows a string result without the quotes of its repr.
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def format_result(value: Any, *, is_main_result: bool) -> dict[str, Any]:
    """Builds the fields of an E2B ``result`` event for one value.

    Args:
        value: The value to show.
        is_main_result: Whether the value is the cell's last expression (not a ``display``).

    Returns:
        A mapping with ``text`` (the repr), optional rich formats and ``is_main_result``.
    """
    result: dict[str, Any] = {"is_main_result": is_main_result}
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr of {type(value).__name__} failed: {exc!r}>"
    result["text"] = _strip_quotes(text)
    extra: dict[str, Any] = {}
    for method, field in _REPR_METHODS:
        func = getattr(value, method, None)
        if func is None or isinstance(value, type) or not callable(func):
            continue
        try:
            shown = func()
        except Exception:
            continue
        if shown is None:
            continue
        if isinstance(shown, tuple):  # (data, metadata)
            shown = shown[0]
        if isinstance(shown, bytes):
            shown = base64.b64encode(shown).decode("ascii")
        if field == "json":
            if isinstance(shown, str):
                try:
                    shown = json.loads(shown)
                except ValueError:
                    extra["application/json"] = shown
                    continue
            if not isinstance(shown, dict):
                shown = {"value": shown}
        result[field] = shown
    if extra:
        result["extra"] = extra
    return result


def _load_figures() -> Any:
    """Loads ``figures.py`` from this script's folder (it is not importable by name here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_sandboxd_figures", FIGURES_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {FIGURES_FILE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PyplotHook:
    """A ``sys.meta_path`` finder that calls back once ``matplotlib.pyplot`` has been executed.

    It finds nothing itself: for ``matplotlib.pyplot`` it asks the finders after it, and wraps
    the loader's ``exec_module`` of the spec they return. Other imports pass straight through.

    Args:
        on_import: Called with the pyplot module after it ran (exceptions are ignored).
    """

    def __init__(self, on_import: Any) -> None:
        self.on_import = on_import
        self._busy = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        """Finds ``matplotlib.pyplot`` through the other finders and hooks its loader.

        Args:
            fullname: The module's name.
            path: The parent package's ``__path__``.
            target: The module being reloaded, if any.

        Returns:
            The hooked spec for ``matplotlib.pyplot``, None for any other module.
        """
        if fullname != PYPLOT or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        execute = getattr(spec.loader, "exec_module", None)
        if execute is None:
            return spec
        on_import = self.on_import

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            with contextlib.suppress(Exception):  # else plain Agg: plt.show() shows nothing
                on_import(module)

        with contextlib.suppress(AttributeError, TypeError):  # a loader that refuses it
            spec.loader.exec_module = exec_module
        return spec


class Driver:
    """Executes cells in one persistent namespace and reports events as frames.

    Args:
        command_fd: The descriptor commands are read from.
        event_fd: The descriptor events are written to.
    """

    def __init__(self, command_fd: int, event_fd: int, *, token: str = "") -> None:
        self.command_fd = command_fd
        self.event_fd = event_fd
        self.sync_prefix = SYNC_START + token.encode("ascii") + b"-"
        self.seq = 0
        self.execution_count = 0
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = module
        self.namespace: dict[str, Any] = module.__dict__
        self.loop: Any = None  # an asyncio event loop, made by the first cell that awaits
        self._figures: Any = None  # figures.py, loaded once a figure may need showing
        builtins.display = self.display  # type: ignore[attr-defined]
        if not any(isinstance(finder, PyplotHook) for finder in sys.meta_path):
            sys.meta_path.insert(0, PyplotHook(self.pyplot_imported))

    def send(self, message: dict[str, Any]) -> None:
        """Writes a sync marker to fds 1 and 2, then the event frame carrying its number.

        Args:
            message: The event.
        """
        _flush_std()
        self.seq += 1
        marker = self.sync_prefix + str(self.seq).encode("ascii") + SYNC_END
        streams: list[str] = []
        for fd, name in ((1, "stdout"), (2, "stderr")):
            try:
                _write_all(fd, marker)
            except OSError:
                continue  # user code closed or replaced the descriptor
            streams.append(name)
        frame = encode_frame({**message, "seq": self.seq, "streams": streams})
        if len(frame) - _HEADER.size > MAX_FRAME:
            frame = encode_frame({**_fit(message), "seq": self.seq, "streams": streams})
        _write_all(self.event_fd, frame)

    def display(self, *objects: Any) -> None:
        """Shows values as non-main results, like IPython's ``display``.

        Args:
            *objects: The values to show.
        """
        for obj in objects:
            self.send_result(obj, is_main_result=False)

    def figures(self) -> Any:
        """The ``figures`` module, loaded on first use.

        Returns:
            The module.
        """
        if self._figures is None:
            self._figures = _load_figures()
        return self._figures

    def pyplot_imported(self, pyplot: types.ModuleType) -> None:
        """Makes ``plt.show()`` show the open figures as results (called by the import hook).

        Args:
            pyplot: The ``matplotlib.pyplot`` module, just executed.
        """
        self.figures().patch_pyplot(pyplot, self.show_figures)

    def send_result(self, value: Any, *, is_main_result: bool) -> None:
        """Sends a ``result`` event for a value; a matplotlib figure gets ``png`` and ``chart``.

        A figure that fails to draw is reported as an ``error`` event (the execution goes on),
        followed by its result without the image, as a Jupyter kernel reports a formatter's
        failure.

        Args:
            value: The value to show.
            is_main_result: Whether it is the cell's last expression's value.
        """
        fields = format_result(value, is_main_result=is_main_result)
        if "matplotlib.figure" in sys.modules:  # else no value can be a Figure
            figures = self.figures()
            if figures.is_figure(value):
                try:
                    png = figures.render_png(value)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    self.report(exc)
                else:
                    if png is not None:
                        fields["png"] = png
                    chart = figures.chart(value)
                    if chart:
                        fields["chart"] = chart
        self.send({"t": "result", **fields})

    def show_figures(self, *, skip: Any = None) -> None:
        """Shows every open pyplot figure as a non-main result, then closes them all.

        Args:
            skip: A figure not to show again (the cell's main result).
        """
        figures = self.figures()
        try:
            for figure in figures.open_figures():
                if figure is not skip:
                    self.send_result(figure, is_main_result=False)
        finally:
            figures.close_all()

    def flush_figures(self, *, skip: Any = None, show: bool = True) -> None:
        """At the end of a cell: shows the figures still open (Agg only) and closes them.

        Args:
            skip: A figure already shown as the cell's main result.
            show: False to close the figures without showing them (an interrupted cell).
        """
        if self._figures is None or PYPLOT not in sys.modules:
            return
        figures = self._figures
        if not figures.handles_show():
            return
        try:
            if show:
                self.show_figures(skip=skip)  # closes them, also when interrupted
            else:
                figures.close_all()
        except Exception as exc:
            self.report(exc)
        except KeyboardInterrupt as exc:  # the time limit came while drawing
            self.report(exc)

    def serve(self) -> None:
        """Answers commands until the command channel closes."""
        self.send({"t": "ready", "pid": os.getpid(), "cwd": os.getcwd()})
        while True:
            try:
                command = read_frame(self.command_fd)
            except KeyboardInterrupt:
                continue  # an interrupt that arrived between executions
            if command is None:
                return
            try:
                self.handle(command)
            except KeyboardInterrupt:
                # The interrupt landed after the cell finished; the cell's events are sent.
                self.send({"t": "done"})

    def handle(self, command: dict[str, Any]) -> None:
        """Runs one command.

        Args:
            command: ``{"op": "execute", "code", "env", "base_env"?}`` or ``{"op": "ping"}``;
                ``base_env`` stays set, ``env`` only for this execution.
        """
        op = command.get("op")
        if op == "ping":
            self.send({"t": "pong"})
            return
        if op != "execute":
            self.send({"t": "done", "bad_command": repr(op)})
            return
        code = str(command.get("code", ""))
        env = command.get("env") or {}
        os.environ.update({str(k): str(v) for k, v in (command.get("base_env") or {}).items()})
        self.execution_count += 1
        self.send({"t": "count", "n": self.execution_count})
        saved = {key: os.environ.get(key) for key in env}
        try:
            os.environ.update({str(k): str(v) for k, v in env.items()})
            self.run_cell(code, self.execution_count)
        finally:
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old
            self.send({"t": "done"})

    def run_cell(self, code: str, number: int) -> None:
        """Compiles and runs one cell; sends the last expression's value or the error.

        Args:
            code: The cell's source.
            number: The execution count (names the cell in tracebacks).
        """
        filename = f"<cell-{number}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
            last: ast.Expression | None = None
            final = tree.body[-1] if tree.body else None
            if isinstance(final, ast.Expr):
                tree.body.pop()
                last = ast.Expression(final.value)
            body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
            tail = None
            if last is not None:
                tail = compile(last, filename, "eval", flags=flags, dont_inherit=True)
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
            self.report(exc)
            return
        value = None
        try:
            self.evaluate(body)
            if tail is not None:
                value = self.evaluate(tail)
        except KeyboardInterrupt as exc:
            self.report(exc)
            self.flush_figures(show=False)
            return
        except BaseException as exc:
            self.report(exc)
            self.flush_figures()
            return
        if value is not None:
            self.namespace["_"] = value
            self.send_result(value, is_main_result=True)
        # Like the inline backend after each cell: figures drawn but not shown become results.
        self.flush_figures(skip=value)

    def evaluate(self, code: types.CodeType) -> Any:
        """Runs compiled code in the namespace, awaiting it when it uses top-level ``await``.

        Args:
            code: The compiled code.

        Returns:
            The value (for ``eval`` mode code).
        """
        value = eval(code, self.namespace)
        if code.co_flags & CO_COROUTINE:
            if self.loop is None or self.loop.is_closed():
                import asyncio  # slow to import; most cells never await

                self.loop = asyncio.new_event_loop()
            value = self.loop.run_until_complete(value)
        return value

    def report(self, exc: BaseException) -> None:
        """Sends an ``error`` event for an exception, without the driver's own frames.

        Args:
            exc: The exception raised by user code.
        """
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        lines = traceback.format_exception(type(exc), exc, tb)
        self.send(
            {
                "t": "error",
                "name": type(exc).__name__,
                "value": _safe_str(exc),
                "traceback": "".join(lines),
            }
        )


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: str() failed>"


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            continue


def _line_buffered(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the driver: ``driver.py EVENT_FD TOKEN``.

    Args:
        argv: The arguments after the script name (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    args = sys.argv[1:] if argv is None else argv
    event_fd = int(args[0])
    token = args[1] if len(args) > 1 else ""
    command_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd in (command_fd, event_fd):
        os.set_inheritable(fd, False)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = _line_buffered(1)
    sys.stderr = _line_buffered(2)
    # Like an interactive interpreter: the working directory, not this folder, is on the path.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = ""
    sys.argv = [""]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    Driver(command_fd, event_fd, token=token).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
