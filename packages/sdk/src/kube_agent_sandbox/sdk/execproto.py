"""The Kubernetes exec/attach channel protocol (``v5.channel.k8s.io``, ``v4.channel.k8s.io``).

Every binary websocket message starts with a channel byte: 0 stdin, 1 stdout, 2 stderr,
3 error (a ``metav1.Status`` JSON when the command ends), 4 terminal resize. v5 adds channel 255
("close"): ``[255, 0]`` closes the remote stdin, so ``cat > file`` ends. Pure functions only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kube_agent_sandbox.sdk.errors import ExecFailedError

STDIN = 0
STDOUT = 1
STDERR = 2
ERROR = 3
RESIZE = 4
CLOSE = 255

PROTOCOL_V5 = "v5.channel.k8s.io"
PROTOCOL_V4 = "v4.channel.k8s.io"
SUBPROTOCOLS = [PROTOCOL_V5, PROTOCOL_V4]


def frame(channel: int, data: bytes) -> bytes:
    """A message for ``channel`` carrying ``data``."""
    return bytes((channel,)) + data


def close_stdin_frame() -> bytes:
    """The v5 message that closes the remote stdin."""
    return bytes((CLOSE, STDIN))


def resize_frame(width: int, height: int) -> bytes:
    """A terminal resize message."""
    return frame(RESIZE, json.dumps({"Width": width, "Height": height}).encode())


def split(message: bytes) -> tuple[int, bytes]:
    """``(channel, payload)`` of a received message.

    Raises:
        ExecFailedError: on an empty message (not part of the protocol).
    """
    if not message:
        raise ExecFailedError("empty message on the exec stream")
    return message[0], message[1:]


def exit_code(status_payload: bytes) -> int:
    """The command's exit code from the error channel's Status.

    ``Success`` is 0; ``NonZeroExitCode`` carries the code in ``details.causes[ExitCode]``.

    Raises:
        ExecFailedError: when the Status reports a failure to run the command at all.
    """
    try:
        status: dict[str, Any] = json.loads(status_payload)
    except ValueError as err:
        text = status_payload.decode("utf-8", "replace")
        raise ExecFailedError(f"exec failed: {text}") from err
    if status.get("status") == "Success":
        return 0
    reason = str(status.get("reason") or "")
    if reason == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message"))
                except (TypeError, ValueError):
                    break
    raise ExecFailedError(f"exec failed: {status.get('message') or status}", reason=reason)


@dataclass(frozen=True)
class ExecResult:
    """What a finished command produced (upstream's ``ExecutionResult``, with bytes kept).

    Attributes:
        exit_code: the command's exit status.
        stdout_bytes: everything written to stdout.
        stderr_bytes: everything written to stderr.
    """

    exit_code: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """The command exited 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing (upstream's ``FileEntry``).

    Attributes:
        name: the base name.
        size: bytes.
        type: ``file``, ``directory``, ``symlink`` or ``other``.
        mod_time: modification time (seconds since the epoch).
    """

    name: str
    size: int
    type: str
    mod_time: float


_TYPES = {
    "regular file": "file",
    "regular empty file": "file",
    "directory": "directory",
    "symbolic link": "symlink",
}


def parse_listing(output: str) -> list[FileEntry]:
    """Parse ``stat -c '%s %Y %F|%n'`` lines (what :func:`list_script` prints)."""
    entries = []
    for line in output.splitlines():
        head, sep, path = line.partition("|")
        if not sep:
            continue
        size, mtime, kind = head.split(" ", 2)
        entries.append(
            FileEntry(
                name=path.rstrip("/").rsplit("/", 1)[-1],
                size=int(size),
                type=_TYPES.get(kind, "other"),
                mod_time=float(mtime),
            )
        )
    return sorted(entries, key=lambda e: e.name)


LIST_SCRIPT = (
    'cd -- "$1" || exit 2; for f in * .[!.]* ..?*; do '
    '[ -e "$f" ] || [ -L "$f" ] || continue; stat -c "%s %Y %F|%n" -- "$f"; done'
)
"""POSIX shell listing one directory (busybox and coreutils ``stat`` both understand it)."""

WRITE_SCRIPT = 'mkdir -p -- "$(dirname -- "$2")" && head -c "$1" > "$2"'
"""Write exactly ``$1`` bytes of stdin to ``$2``: ends without stdin EOF (works on v4 too)."""


KILLABLE_WRAPPER = 'echo "$$" >&2; exec "$@"'
"""Prints the command's PID on stderr, then becomes the command (``exec`` keeps the PID)."""

KILL_TREE_SCRIPT = (
    'tree() { for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; '
    "r=${l##*) }; r=${r#* }; p=${r%% *}; "
    'if [ "$p" = "$1" ]; then c=${s#/proc/}; tree "${c%/stat}"; fi; done; '
    'kill -KILL "$1" 2>/dev/null; }; tree "$1"; true'
)
"""Kills ``$1`` and its descendants (found by parent PID in ``/proc``), children first."""


def killable(command: list[str]) -> list[str]:
    """``command`` wrapped so its PID is known and a timeout can kill it (needs ``sh``)."""
    return ["sh", "-c", KILLABLE_WRAPPER, "sh", *command]


class PidPrefix:
    """Splits the wrapper's PID line off the front of the stderr stream.

    Attributes:
        pid: the remote PID once its line was read.
    """

    def __init__(self) -> None:
        self.pid: str | None = None
        self._buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        """The part of ``chunk`` that is the command's own stderr."""
        if self.pid is not None:
            return chunk
        self._buffer += chunk
        line, sep, rest = self._buffer.partition(b"\n")
        if not sep:
            return b""
        self.pid = line.decode("ascii", "replace").strip()
        self._buffer = b""
        return rest
