"""execinput's calls: the exact scripts run, the resend of what the kubelet dropped, the errors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from kube_agent_sandbox.gateway.dataplane import execinput
from kube_agent_sandbox.gateway.dataplane import execscripts as scripts
from kube_agent_sandbox.gateway.dataplane.execwire import ExecFailure


@dataclass
class Out:
    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    failure: str | None = None


class Scripted:
    """A container whose ``run`` answers from a list and records each argv and stdin."""

    def __init__(self, *answers: Out) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], bytes | None]] = []

    @contextlib.asynccontextmanager
    async def open(self, argv: list[str], **_: Any) -> AsyncIterator[Any]:
        raise AssertionError("no stream expected")
        yield

    async def run(self, argv: list[str], *, stdin: bytes | None = None) -> Out:
        self.calls.append((argv, stdin))
        return self.answers.pop(0)


def test_scripts_take_values_as_arguments() -> None:
    assert scripts.SEND_INPUT == (
        'd=/tmp/.agent-sandbox-exec/$1; [ -p "$d/in" ] && kill -0 "$1" 2>/dev/null || exit 44; '
        '[ -e "$d/closed" ] && exit 51; read -r k < "$d/kind"; '
        '[ "$k" = "$2" ] || { printf %s "$k"; exit 52; }; '
        't=$d/.in.$$; head -c "$3" > "$t" && wc -c < "$t" && cat "$t" 1<>"$d/in"; '
        'r=$?; rm -f -- "$t"; exit "$r"'
    )
    assert scripts.RESIZE_PTY.endswith('stty -F "/proc/$1/fd/0" rows "$2" cols "$3"')
    assert scripts.CLOSE_INPUT.endswith(
        ': > "$d/closed"; read -r h < "$d/holder" && kill "$h" 2>/dev/null; true'
    )


async def test_send_input_resends_what_did_not_arrive() -> None:
    container = Scripted(Out(0, b"3\n"), Out(0, b"0\n"), Out(0, b"     7\n"))
    await execinput.send_input(container, 42, "stdin", b"0123456789")
    assert container.calls == [
        (scripts.sh(scripts.SEND_INPUT, "42", "stdin", "10"), b"0123456789"),
        (scripts.sh(scripts.SEND_INPUT, "42", "stdin", "7"), b"3456789"),
        (scripts.sh(scripts.SEND_INPUT, "42", "stdin", "7"), b"3456789"),
    ]


async def test_send_input_gives_up_when_nothing_arrives() -> None:
    container = Scripted(*[Out(0, b"0\n")] * execinput.MAX_SEND_ATTEMPTS)
    with pytest.raises(ExecFailure, match="0 of 2 bytes arrived") as failed:
        await execinput.send_input(container, 42, "pty", b"ab")
    assert failed.value.code == "internal"
    assert len(container.calls) == execinput.MAX_SEND_ATTEMPTS


async def test_empty_input_still_checks_the_process() -> None:
    container = Scripted(Out(0, b"0\n"))
    await execinput.send_input(container, 7, "stdin", b"")
    assert container.calls == [(scripts.sh(scripts.SEND_INPUT, "7", "stdin", "0"), b"")]


@pytest.mark.parametrize(
    ("answer", "code", "text"),
    [
        (Out(scripts.NOT_FOUND), "not_found", "pid 42 not found"),
        (Out(scripts.STDIN_CLOSED), "failed_precondition", "is closed"),
        (Out(scripts.WRONG_INPUT_KIND, b"pty"), "invalid_argument", "is a PTY: send input.pty"),
        (Out(1, stderr=b"head: write error"), "internal", "head: write error"),
        (Out(0, b"11\n"), "internal", "unexpected answer"),
        (Out(0, b""), "internal", "unexpected answer"),
    ],
)
async def test_send_input_errors(answer: Out, code: str, text: str) -> None:
    with pytest.raises(ExecFailure, match=text) as failed:
        await execinput.send_input(Scripted(answer), 42, "stdin", b"0123456789")
    assert failed.value.code == code


async def test_close_and_resize() -> None:
    container = Scripted(Out(0), Out(0), Out(scripts.NOT_FOUND), Out(scripts.NOT_FOUND))
    await execinput.close_input(container, 9)
    await execinput.resize_pty(container, 9, 100, 40)
    assert [argv for argv, _ in container.calls] == [
        scripts.sh(scripts.CLOSE_INPUT, "9"),
        scripts.sh(scripts.RESIZE_PTY, "9", "40", "100"),
    ]
    with pytest.raises(ExecFailure, match="not found") as closed:
        await execinput.close_input(container, 9)
    assert closed.value.code == "not_found"
    with pytest.raises(ExecFailure, match="not a PTY"):
        await execinput.resize_pty(container, 9, 100, 40)
