"""Python counterparts of upstream's ``/debug/pprof`` endpoints (``--enable-pprof[-debug]``).

Upstream serves Go's pprof handlers on the metrics server. Their data formats are Go-specific,
so this module keeps the paths and the intent with Python's own tools, as plain text:

* ``/debug/pprof/profile?seconds=N`` (``--enable-pprof``): a deterministic ``cProfile`` of the
  event loop thread for N seconds (default 30, at most 300), as ``pstats`` text sorted by
  cumulative time. Where all reconciles run, so it shows where a slow controller spends time.
* with ``--enable-pprof-debug`` also ``/debug/pprof/`` (index), ``/debug/pprof/goroutine``
  (stacks of every asyncio task and thread), ``/debug/pprof/heap`` (top allocation sites from
  ``tracemalloc``, which is started for this and slows allocation down), and
  ``/debug/pprof/cmdline``.

Go's block, mutex, trace and fgprof profiles have no Python equivalent and are not served;
``--pprof-block-profile-rate`` and ``--pprof-mutex-profile-fraction`` are accepted and ignored.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import logging
import pstats
import sys
import threading
import traceback
import tracemalloc
from typing import Final

from kube_agent_sandbox.controller.runtime import HttpHandler, HttpRequest, HttpResponse

__all__ = ["DEFAULT_SECONDS", "MAX_SECONDS", "profiling_handlers"]

logger = logging.getLogger(__name__)

DEFAULT_SECONDS: Final = 30
MAX_SECONDS: Final = 300
HEAP_TOP: Final = 50
TRACEMALLOC_FRAMES: Final = 10

_recording: set[int] = set()
"""Non-empty while a CPU profile is being recorded (one at a time per process)."""


def profiling_handlers(*, debug: bool) -> dict[str, HttpHandler]:
    """The handlers to mount on the metrics server.

    Args:
        debug: also serve the sensitive/expensive endpoints (``--enable-pprof-debug``); starts
            ``tracemalloc``.

    Returns:
        Path to handler.
    """
    handlers: dict[str, HttpHandler] = {"/debug/pprof/profile": _profile}
    if debug:
        if not tracemalloc.is_tracing():
            tracemalloc.start(TRACEMALLOC_FRAMES)
        handlers |= {
            "/debug/pprof/": _index,
            "/debug/pprof/goroutine": _stacks,
            "/debug/pprof/heap": _heap,
            "/debug/pprof/cmdline": _cmdline,
        }
    return handlers


def _seconds(request: HttpRequest) -> int | HttpResponse:
    """The ``seconds`` parameter, or the 400 answer to a bad one."""
    raw = request.query.get("seconds", str(DEFAULT_SECONDS))
    try:
        seconds = int(raw)
    except ValueError:
        return HttpResponse(f"invalid seconds {raw!r}\n", 400)
    if not 1 <= seconds <= MAX_SECONDS:
        return HttpResponse(f"seconds must be in 1..{MAX_SECONDS}\n", 400)
    return seconds


async def _profile(request: HttpRequest) -> HttpResponse:
    seconds = _seconds(request)
    if isinstance(seconds, HttpResponse):
        return seconds
    if _recording:
        return HttpResponse("a profile is already being recorded\n", 409)
    _recording.add(1)
    try:
        profiler = cProfile.Profile()
        try:
            profiler.enable()
        except ValueError as err:  # another profiler (e.g. a debugger) is active
            return HttpResponse(f"cannot profile: {err}\n", 409)
        try:
            await asyncio.sleep(seconds)
        finally:
            profiler.disable()
    finally:
        _recording.clear()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(100)
    return HttpResponse(out.getvalue())


async def _index(_: HttpRequest) -> HttpResponse:
    paths = ["profile?seconds=30", "goroutine", "heap", "cmdline"]
    body = "".join(f"/debug/pprof/{path}\n" for path in paths)
    return HttpResponse(body)


async def _stacks(_: HttpRequest) -> HttpResponse:
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out.write(f"asyncio tasks: {len(tasks)}\n\n")
    for task in tasks:
        out.write(f"task {task.get_name()} {task.get_coro()!r}\n")
        task.print_stack(file=out)
        out.write("\n")
    frames = sys._current_frames()
    out.write(f"threads: {len(frames)}\n\n")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in frames.items():
        out.write(f"thread {names.get(ident, ident)}\n")
        out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    return HttpResponse(out.getvalue())


async def _heap(_: HttpRequest) -> HttpResponse:
    if not tracemalloc.is_tracing():
        return HttpResponse("tracemalloc is not running\n", 503)
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    out = io.StringIO()
    out.write(f"traced memory: current={current} peak={peak}\n\n")
    for stat in snapshot.statistics("lineno")[:HEAP_TOP]:
        out.write(f"{stat}\n")
    return HttpResponse(out.getvalue())


async def _cmdline(_: HttpRequest) -> HttpResponse:
    return HttpResponse("\x00".join(sys.argv))
