"""Shell scripts the exec fallback runs in pods, and parsers of what they print.

Every script is POSIX ``sh`` run as ``sh -c SCRIPT sh ARGS...``: paths and commands from clients
travel only as positional arguments, never spliced into the script text. Scripts start in the
exec user's home directory (envd resolves relative paths against the user's home) and signal
outcomes with exit codes the fallback maps to envd's errors.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

NOT_FOUND = 44
NOT_A_DIRECTORY = 45
ALREADY_EXISTS = 46
IS_A_DIRECTORY = 47
NOT_A_REGULAR_FILE = 48
SAME_FILE = 49
SOURCE_IS_A_DIRECTORY = 50
STDIN_CLOSED = 51
WRONG_INPUT_KIND = 52

_PRELUDE = (
    'cd 2>/dev/null || cd /; printf "P|%s\\n" "$PWD"; '
    'one() { if [ -L "$1" ]; then '
    'printf "T|%s\\n" "$(readlink -- "$1")"; '
    'printf "K|%s\\n" "$(stat -L -c %F -- "$1" 2>/dev/null)"; fi; '
    "stat -c 'S|%s|%f|%A|%U|%G|%Y|%F|%n' -- \"$1\"; }; "
)

STAT = _PRELUDE + f'[ -e "$1" ] || [ -L "$1" ] || exit {NOT_FOUND}; one "$1"'
"""``$1``: path. Prints its entry."""

LIST_DIR = _PRELUDE + (
    f'[ -e "$1" ] || exit {NOT_FOUND}; [ -d "$1" ] || exit {NOT_A_DIRECTORY}; '
    'find "$1" -mindepth 1 -maxdepth "$2" | while IFS= read -r f; do one "$f"; done'
)
"""``$1``: directory, ``$2``: depth. Prints one entry per descendant."""

MAKE_DIR = _PRELUDE + f'[ -e "$1" ] && exit {ALREADY_EXISTS}; mkdir -p -- "$1" && one "$1"'
"""``$1``: directory to create (with parents)."""

REMOVE = _PRELUDE + f'[ -e "$1" ] || [ -L "$1" ] || exit {NOT_FOUND}; rm -rf -- "$1"'
"""``$1``: path to remove (recursively)."""

MOVE = _PRELUDE + (
    f'[ -e "$1" ] || [ -L "$1" ] || exit {NOT_FOUND}; '
    'mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2" && one "$2"'
)
"""``$1``: source, ``$2``: destination."""

READ_FILE = (
    f'cd 2>/dev/null || cd /; [ -e "$1" ] || exit {NOT_FOUND}; '
    f'[ -d "$1" ] && exit {IS_A_DIRECTORY}; exec cat -- "$1"'
)
"""``$1``: file to print."""

WRITE_FILE = (
    'cd 2>/dev/null || cd /; printf "%s\\n" "$PWD"; '
    f'[ -d "$1" ] && exit {IS_A_DIRECTORY}; '
    'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && wc -c < "$1"'
)
"""``$1``: file to write from stdin (needs stdin closed at the end: v5).

Prints the home directory, then the size written (checked against what was sent)."""

START_PROCESS = (
    'cd 2>/dev/null || cd /; if [ -n "$1" ]; then cd -- "$1" || exit 1; fi; shift; '
    'echo "$$" >&2; exec env "$@"'
)
"""``$1``: working directory or empty, then ``NAME=value``... and the argv. PID first on stderr."""


COMPOSE = (
    'cd 2>/dev/null || cd /; printf "%s\\n" "$PWD"; '
    'fail() { printf "%s" "$2" >&2; exit "$1"; }; d=$1; shift; '
    f'[ -d "$d" ] && fail {IS_A_DIRECTORY} "$d"; '
    "for s do "
    f'[ -e "$s" ] || fail {NOT_FOUND} "$s"; [ -d "$s" ] && fail {SOURCE_IS_A_DIRECTORY} "$s"; '
    f'[ -f "$s" ] || fail {NOT_A_REGULAR_FILE} "$s"; [ "$s" -ef "$d" ] && fail {SAME_FILE} "$s"; '
    "done; "
    'p=$(dirname -- "$d"); q=$p; while [ ! -e "$q" ]; do q=$(dirname -- "$q"); done; '
    f'[ -d "$q" ] || fail {NOT_A_DIRECTORY} "$q"; '
    'mkdir -p -- "$p" || exit 1; t="$d.e2b-compose.$$.tmp"; '
    'cat -- "$@" > "$t" && mv -f -- "$t" "$d" || { rm -f -- "$t"; exit 1; }; rm -f -- "$@"'
)
"""``$1``: destination, then the sources in order (envd's ``/files/compose``): checks them all
(a failed check prints the path on stderr; the destination's nearest existing ancestor must be
a directory), concatenates them into a temporary file next to
the destination, renames it over the destination, then deletes the sources. Prints the home
directory first."""


SIGNAL_TREE = (
    f'kill -0 "$2" 2>/dev/null || exit {NOT_FOUND}; '
    'tree() { kill -STOP "$1" 2>/dev/null; echo "$1"; '
    'for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; '
    "r=${l##*) }; r=${r#* }; p=${r%% *}; "
    'if [ "$p" = "$1" ]; then c=${s#/proc/}; tree "${c%/stat}"; fi; done; }; '
    'pids=$(tree "$2"); kill -s "$1" $pids 2>/dev/null; kill -CONT $pids 2>/dev/null; true'
)
"""``$1``: signal name (``TERM``, ``KILL``), ``$2``: PID. Signals the process and all its
descendants: each is stopped before its children are looked up (by parent PID in ``/proc``), so
none can fork or carry on unseen; then all get the signal together and are continued (a
``TERM`` reaches its handlers). Exits ``NOT_FOUND`` when the PID does not exist."""


INPUT_DIR = "/tmp/.agent-sandbox-exec"
"""Where a command's stdin FIFO lives: ``INPUT_DIR/<pid>/in`` (mode 0700 folders)."""

_INPUT = f'd={INPUT_DIR}/$1; [ -p "$d/in" ] && kill -0 "$1" 2>/dev/null || exit {NOT_FOUND}; '

RELAY_INPUT = (
    f'b={INPUT_DIR}; d=$b/$1; mkdir -p -m 0700 "$b" && rm -rf -- "$d" && mkdir -m 0700 "$d" '
    '&& mkfifo -m 0600 "$d/in" && echo "$2" > "$d/kind" || exit 1; '
    'sh -c \'exec 3<>"$2/in"; '
    'while kill -0 "$1" 2>/dev/null && [ ! -e "$2/closed" ]; do sleep 1 3>&-; done; '
    'kill -0 "$1" 2>/dev/null || rm -rf -- "$2"\' '
    'sh "$1" "$d" </dev/null >/dev/null 2>&1 & '
    'echo "$!" > "$d/holder"; echo ready >&2; cat "$d/in"; rm -rf -- "$d"'
)
"""``$1``: PID of a command started with stdin, ``$2``: ``stdin`` or ``pty``. Runs beside the
command on the gateway replica that started it: makes the FIFO ``$d/in``, starts its holder
(keeps the FIFO open for writing, so ``cat`` sees no EOF between two writers and writers never
block on an absent reader; it ends when ``closed`` appears or when the command ends, then
removing the folder too in case the relay is gone), prints
``ready`` on stderr, then copies the FIFO to stdout (the replica writes it to the command's
stdin) until every writer is gone, and removes the folder."""

SEND_INPUT = _INPUT + (
    f'[ -e "$d/closed" ] && exit {STDIN_CLOSED}; read -r k < "$d/kind"; '
    f'[ "$k" = "$2" ] || {{ printf %s "$k"; exit {WRONG_INPUT_KIND}; }}; '
    't=$d/.in.$$; head -c "$3" > "$t" && wc -c < "$t" && cat "$t" 1<>"$d/in"; '
    'r=$?; rm -f -- "$t"; exit "$r"'
)
"""``$1``: PID, ``$2``: ``stdin`` or ``pty``, ``$3``: byte count; the bytes on stdin. Prints how
many of them arrived (the kubelet may drop the tail of stdin when the stream closes) after
writing those to the FIFO; it opens the FIFO read-write so the open never blocks. Exits
``WRONG_INPUT_KIND`` printing the command's kind when ``$2`` is not it."""

CLOSE_INPUT = _INPUT + (': > "$d/closed"; read -r h < "$d/holder" && kill "$h" 2>/dev/null; true')
"""``$1``: PID. Ends the holder: the command sees EOF once the writers still running finish."""

RESIZE_PTY = _INPUT + (
    f'read -r k < "$d/kind"; [ "$k" = pty ] || exit {NOT_FOUND}; '
    'stty -F "/proc/$1/fd/0" rows "$2" cols "$3"'
)
"""``$1``: PID of a PTY, ``$2``: rows, ``$3``: columns. Sets the size of the terminal on the
command's stdin; the kernel sends SIGWINCH to the terminal's foreground process group."""


def sh(script: str, *args: str) -> list[str]:
    """The exec argv running ``script`` with positional ``args``."""
    return ["sh", "-c", script, "sh", *args]


def start_argv(cmd: str, args: list[str], *, envs: dict[str, str], cwd: str | None) -> list[str]:
    """The exec argv of a ``process.Process/Start`` request.

    Raises:
        ValueError: for an empty command or an environment name ``env`` would misread.
    """
    if not cmd:
        raise ValueError("the process needs a command")
    pairs = []
    for name, value in envs.items():
        if not name or "=" in name or "\0" in name or name.startswith("-"):
            raise ValueError(f"invalid environment variable name {name!r}")
        pairs.append(f"{name}={value}")
    # "--" ends env's options before the assignments; a command containing "=" would be read
    # as one more assignment, so it runs through sh instead.
    command = [cmd, *args]
    if "=" in cmd:
        command = ["sh", "-c", 'exec "$@"', "sh", *command]
    return sh(START_PROCESS, cwd or "", "--", *pairs, *command)


_FILE_TYPES = {
    "regular file": "FILE_TYPE_FILE",
    "regular empty file": "FILE_TYPE_FILE",
    "directory": "FILE_TYPE_DIRECTORY",
    "symbolic link": "FILE_TYPE_SYMLINK",
}
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27


def _rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Listing:
    """What a stat/list script printed.

    Attributes:
        home: the directory relative paths were resolved against.
        entries: envd ``EntryInfo`` objects in proto3 JSON form.
    """

    home: str = "/"
    entries: list[dict[str, Any]] = field(default_factory=list)


def absolute(path: str, home: str) -> str:
    """``path`` resolved against ``home`` (envd answers with absolute paths)."""
    return posixpath.normpath(posixpath.join(home, path))


def parse_listing(output: bytes) -> Listing:
    """Parse the ``P|``, ``T|``, ``K|`` and ``S|`` lines of the stat scripts."""
    listing = Listing()
    target: str | None = None
    target_kind: str | None = None
    for raw in output.decode("utf-8", "replace").splitlines():
        tag, sep, rest = raw.partition("|")
        if not sep:
            continue
        if tag == "P":
            listing.home = rest or "/"
        elif tag == "T":
            target = rest
        elif tag == "K":
            target_kind = rest
        elif tag == "S":
            fields = rest.split("|", 7)
            if len(fields) != 8:
                continue
            size, mode_hex, perms, owner, group, mtime, kind, name = fields
            try:
                raw_mode = int(mode_hex, 16)
                size_value = int(size)
                mtime_value = int(mtime)
            except ValueError:
                continue
            path = absolute(name, listing.home)
            is_symlink = kind == "symbolic link"
            shown = target_kind if is_symlink and target_kind else kind
            mode = raw_mode & 0o7777
            if shown == "directory":
                mode |= _GO_MODE_DIR
            if is_symlink:
                mode |= _GO_MODE_SYMLINK
            entry: dict[str, Any] = {
                "name": posixpath.basename(path.rstrip("/")) or "/",
                "type": _FILE_TYPES.get(shown, "FILE_TYPE_UNSPECIFIED"),
                "path": path,
                "size": str(size_value),
                "mode": mode,
                "permissions": perms,
                "owner": owner,
                "group": group,
                "modifiedTime": _rfc3339(mtime_value),
            }
            if is_symlink:
                entry["isSymlink"] = True
                entry["type"] = _FILE_TYPES.get(target_kind or "", "FILE_TYPE_FILE")
                if target is not None:
                    entry["symlinkTarget"] = target
            listing.entries.append(entry)
            target = None
            target_kind = None
    return listing
