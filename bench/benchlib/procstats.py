"""Memory and CPU of a process, read from ``/proc`` (Linux only).

``VmRSS`` is the resident set now, ``VmHWM`` its peak ("high-water mark") since the process
started; CPU seconds are user + system time from ``/proc/<pid>/stat``. A
:class:`ProcessSampler` polls a process in the background so a benchmark gets the peak and a
timeline without the process having to cooperate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process.

    Attributes:
        at: ``time.monotonic()`` of the reading.
        rss: Resident set size in bytes.
        hwm: Peak resident set size in bytes.
        cpu_seconds: User + system CPU time in seconds.
    """

    at: float
    rss: int
    hwm: int
    cpu_seconds: float


def read_sample(pid: int) -> ProcSample:
    """Read RSS, peak RSS and CPU time of ``pid``.

    Raises:
        ProcessLookupError: If the process is gone.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError as err:
        raise ProcessLookupError(pid) from err
    values: dict[str, int] = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    return ProcSample(time.monotonic(), values.get("VmRSS", 0), values.get("VmHWM", 0), cpu)


def self_rss() -> int:
    """Resident set size of this process in bytes."""
    return read_sample(os.getpid()).rss


@dataclass
class ProcessSampler:
    """Samples a process every ``interval`` seconds while running (an asyncio task).

    Attributes:
        pid: The process watched.
        interval: Seconds between samples.
        samples: Every reading taken, oldest first.
    """

    pid: int
    interval: float = 1.0
    samples: list[ProcSample] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling in the background."""
        self._task = asyncio.create_task(self._run(), name=f"sampler-{self.pid}")

    async def stop(self) -> None:
        """Stop sampling (takes one last sample when the process is still there)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.sample()

    def sample(self) -> ProcSample | None:
        """Take one reading now; None when the process is gone."""
        try:
            reading = read_sample(self.pid)
        except ProcessLookupError:
            return None
        self.samples.append(reading)
        return reading

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    @property
    def peak_rss(self) -> int:
        """Largest RSS seen (or the kernel's high-water mark when larger)."""
        if not self.samples:
            return 0
        return max(max(s.rss for s in self.samples), self.samples[-1].hwm)

    def timeline(self, *, every: float = 5.0) -> list[dict[str, float]]:
        """Samples thinned to one per ``every`` seconds, relative to the first, for reports."""
        if not self.samples:
            return []
        start = self.samples[0].at
        out: list[dict[str, float]] = []
        next_at = start
        for s in self.samples:
            if s.at >= next_at or s is self.samples[-1]:
                out.append(
                    {
                        "t": round(s.at - start, 1),
                        "rss_mib": round(s.rss / MIB, 1),
                        "cpu_s": round(s.cpu_seconds, 2),
                    }
                )
                next_at = s.at + every
        return out
