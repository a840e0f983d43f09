"""``agent-sandbox``: create, claim, inspect, enter and remove sandboxes from a shell.

It stays one module: every command is a small function registered on the one typer ``app``,
and they share the global :class:`State` and the error-to-exit-code mapping defined here.

Built on typer (arguments, help, shell completion via ``--install-completion``); data goes to
stdout as plain text (kubectl-like tables, JSON, YAML, names) and rich, loaded on first use,
prints errors and the progress spinner on stderr. Every command goes through the sync SDK
client, so the CLI and the library behave the same. Exit codes are stable for scripts (see
:data:`EXIT_CODES`); ``exec`` exits with the remote command's code. ``--enable-tracing`` (or
``AGENT_SANDBOX_ENABLE_TRACING=true``) traces the command as the SDK does with
``SandboxTracerConfig(enable_tracing=True)``, under one span for the whole command.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kube_agent_sandbox.sdk import execproto
from kube_agent_sandbox.sdk.cli import mcp_command, output, snapshot_command, top
from kube_agent_sandbox.sdk.config import ClusterConfig, load_kubeconfig
from kube_agent_sandbox.sdk.errors import (
    ConfigError,
    NotFoundError,
    PermissionDeniedError,
    SandboxError,
    SandboxFailedError,
    SandboxTimeoutError,
)
from kube_agent_sandbox.sdk.tracing import (
    DEFAULT_SERVICE_NAME,
    ClientTracer,
    SandboxTracerConfig,
    tracer_for,
)

if TYPE_CHECKING:
    from kube_agent_sandbox.sdk import SandboxClient

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_TIMEOUT = 4
EXIT_FAILED = 5
EXIT_FORBIDDEN = 6
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_ERROR: "any other error (API refused the request, exec could not start...)",
    EXIT_USAGE: "bad arguments or input (typer/click usage errors, invalid manifest)",
    EXIT_NOT_FOUND: "the sandbox, claim or file does not exist",
    EXIT_TIMEOUT: "a wait or command ran out of time",
    EXIT_FAILED: "the sandbox or claim failed (terminal Ready reason)",
    EXIT_FORBIDDEN: "permission denied (RBAC)",
}

TRACING_ENV = "AGENT_SANDBOX_ENABLE_TRACING"
"""Environment variable that turns tracing on, like ``--enable-tracing``."""

app = typer.Typer(
    name="agent-sandbox",
    help="Create, claim and use Agent Sandboxes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class _LazyConsole:
    """A rich ``Console`` made on first use.

    rich costs about 60 ms of every start; data output (tables, JSON, YAML, names) is plain
    text written with :func:`typer.echo`, so ``list`` and ``get`` never load it.
    """

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
        return getattr(self._console, name)


out = _LazyConsole()
err = _LazyConsole(stderr=True)


class State:
    """Global options, and how commands get a client (tests replace ``factory``)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: Path | None = None
    tracer_config: SandboxTracerConfig | None = None
    #: The command's span (tracing on): ``_fail`` records the exit code on it.
    tracer: ClientTracer | None = None
    factory: Callable[[State], SandboxClient] | None = None

    def client(self) -> SandboxClient:
        """A client for the chosen kubeconfig/context/namespace."""
        if self.factory is not None:
            return self.factory(self)
        from kube_agent_sandbox.sdk import SandboxClient  # httpx loads here, not with --help

        config: ClusterConfig | None = None
        if self.kubeconfig is not None:
            config = load_kubeconfig(self.kubeconfig, context=self.context)
        return SandboxClient(
            config,
            namespace=self.namespace,
            context=self.context,
            tracer_config=self.tracer_config,
        )


state = State()

Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table, wide, json, yaml or name.")]
Timeout = Annotated[float, typer.Option(help="Seconds to wait.")]


def _fail(code: int, message: str) -> NoReturn:
    if state.tracer is not None:
        state.tracer.set_attributes({"cli.exit_code": code})
    from rich.markup import escape  # rich loads to print anyway

    # escaped: "[tracing]" in an install hint is text, not a style tag
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(code)


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Turn SDK errors into a message on stderr and a documented exit code."""
    try:
        yield
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    except NotFoundError as exc:
        _fail(EXIT_NOT_FOUND, str(exc))
    except SandboxTimeoutError as exc:
        _fail(EXIT_TIMEOUT, str(exc))
    except SandboxFailedError as exc:
        _fail(EXIT_FAILED, str(exc))
    except PermissionDeniedError as exc:
        _fail(EXIT_FORBIDDEN, str(exc))
    except (ConfigError, SandboxError) as exc:
        _fail(EXIT_ERROR, str(exc))


@contextlib.contextmanager
def _spinner(message: str, *, enabled: bool = True) -> Iterator[None]:
    if enabled and err.is_terminal:
        with err.status(message):
            yield
    else:
        yield


def _emit(objs: Any, fmt: str, *, claims: bool = False) -> None:
    if fmt in ("table", "wide"):
        items = [objs] if isinstance(objs, dict) else list(objs)
        if not items:
            err.print("No resources found.")
            return
        typer.echo(output.table(items, claims=claims, wide=fmt == "wide"))
        return
    kind = "SandboxClaimList" if claims else "SandboxList"
    typer.echo(output.serialize(objs, fmt, list_kind=kind))


def _check_format(fmt: str) -> None:
    if fmt not in output.FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(output.FORMATS)}")


@app.callback()
def main_options(
    ctx: typer.Context,
    namespace: Namespace = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log SDK requests.")] = False,
    enable_tracing: Annotated[
        bool,
        typer.Option(
            "--enable-tracing",
            "--trace",
            envvar=TRACING_ENV,
            help="Export the command's spans over OTLP (OTEL_EXPORTER_OTLP_* variables); "
            "needs the SDK's tracing extra.",
        ),
    ] = False,
    trace_service_name: Annotated[
        str,
        typer.Option(
            envvar="OTEL_SERVICE_NAME", help="service.name of the spans and their name prefix."
        ),
    ] = DEFAULT_SERVICE_NAME,
) -> None:
    """Create, claim and use Agent Sandboxes (agents.x-k8s.io)."""
    state.namespace = namespace
    state.context = context
    state.kubeconfig = kubeconfig
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)
    state.tracer_config = state.tracer = None
    if enable_tracing:
        _start_tracing(ctx, trace_service_name)


def _start_tracing(ctx: typer.Context, service_name: str) -> None:
    """Open the command's span (``<service>.cli.<command>``) until the command ends.

    The SDK's calls are its children; the spans are exported at exit (OpenTelemetry's own
    exit hook flushes the batch).
    """
    if not service_name.strip():
        _fail(EXIT_USAGE, "--trace-service-name must not be empty")
    config = SandboxTracerConfig(enable_tracing=True, trace_service_name=service_name)
    try:
        tracer = tracer_for(config)
    except ImportError as exc:
        _fail(EXIT_USAGE, str(exc))
    command = ctx.invoked_subcommand or ""
    ctx.with_resource(tracer.span(f"cli.{command}", {"cli.command": command}))
    state.tracer_config, state.tracer = config, tracer


@app.command()
def create(
    filename: Annotated[Path, typer.Option("--filename", "-f", help="Sandbox manifest (YAML).")],
    name: Annotated[str | None, typer.Option(help="Name (overrides the manifest).")] = None,
    namespace: Namespace = None,
    wait: Annotated[bool, typer.Option(help="Wait until Ready.")] = True,
    timeout: Timeout = 180.0,
    fmt: OutputOpt = "name",
) -> None:
    """Create a Sandbox from a manifest and (by default) wait until it is Ready."""
    with _errors():
        _check_format(fmt)
        if not filename.is_file():
            raise ValueError(f"no such file: {filename}")
        client = state.client()
        with _spinner(f"Creating sandbox from {filename}...", enabled=wait):
            box = client.create_sandbox(
                filename, name=name, namespace=namespace, wait=wait, timeout=timeout
            )
        _emit(client.get(box.name, namespace=box.namespace), fmt)


@app.command()
def claim(
    warm_pool: Annotated[str, typer.Argument(help="SandboxWarmPool to claim from.")],
    name: Annotated[str | None, typer.Option(help="Claim name.")] = None,
    namespace: Namespace = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE.")] = None,
    pod_label: Annotated[list[str] | None, typer.Option(help="Pod label KEY=VALUE.")] = None,
    pod_annotation: Annotated[
        list[str] | None, typer.Option(help="Pod annotation KEY=VALUE.")
    ] = None,
    shutdown_after: Annotated[
        int | None, typer.Option(help="Delete the claim after this many seconds.")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait until Ready.")] = True,
    timeout: Timeout = 180.0,
    fmt: OutputOpt = "name",
) -> None:
    """Claim a Sandbox from a warm pool (a SandboxClaim) and print the bound Sandbox."""
    with _errors():
        _check_format(fmt)
        options: dict[str, Any] = {
            "env": output.parse_pairs(env or [], what="--env") or None,
            "pod_labels": output.parse_pairs(pod_label or [], what="--pod-label") or None,
            "pod_annotations": output.parse_pairs(pod_annotation or [], what="--pod-annotation")
            or None,
            "shutdown_after_seconds": shutdown_after,
        }
        if name:
            options["name"] = name
        client = state.client()
        with _spinner(f"Claiming a sandbox from {warm_pool}...", enabled=wait):
            box = client.claim_sandbox(
                warm_pool, namespace=namespace, wait=wait, timeout=timeout, **options
            )
        if fmt == "name":
            out.print(box.name if wait else box.claim_name, highlight=False)
            return
        assert box.claim_name is not None
        _emit(client.get_claim(box.claim_name, namespace=box.namespace), fmt, claims=True)


@app.command("list")
def list_(
    namespace: Namespace = None,
    selector: Annotated[
        str | None, typer.Option("--selector", "-l", help="Label selector.")
    ] = None,
    claims: Annotated[bool, typer.Option(help="List SandboxClaims instead.")] = False,
    fmt: OutputOpt = "table",
) -> None:
    """List Sandboxes (or claims) like ``kubectl get``."""
    with _errors():
        _check_format(fmt)
        client = state.client()
        if claims:
            _emit(
                client.list_claims(namespace=namespace, label_selector=selector), fmt, claims=True
            )
        else:
            _emit(client.list_sandboxes(namespace=namespace, label_selector=selector), fmt)


@app.command()
def get(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    claim: Annotated[bool, typer.Option(help="NAME is a SandboxClaim.")] = False,
    fmt: OutputOpt = "table",
) -> None:
    """Show one Sandbox (or claim)."""
    with _errors():
        _check_format(fmt)
        client = state.client()
        if claim:
            _emit(client.get_claim(name, namespace=namespace), fmt, claims=True)
        else:
            _emit(client.get(name, namespace=namespace), fmt)


@app.command()
def wait(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    for_: Annotated[str, typer.Option("--for", help="ready or delete.")] = "ready",
    claim: Annotated[bool, typer.Option(help="NAME is a SandboxClaim.")] = False,
    timeout: Timeout = 180.0,
) -> None:
    """Wait until a Sandbox (or claim) is Ready, or deleted."""
    with _errors():
        if for_ not in ("ready", "delete"):
            raise ValueError("--for must be ready or delete")
        client = state.client()
        with _spinner(f"Waiting for {name} ({for_})..."):
            if for_ == "delete":
                client.wait_deleted(name, namespace=namespace, claim=claim, timeout=timeout)
            elif claim:
                client.wait_claim_ready(name, namespace=namespace, timeout=timeout)
            else:
                client.wait_ready(name, namespace=namespace, timeout=timeout)
        err.print(f"{name} {'deleted' if for_ == 'delete' else 'ready'}", highlight=False)


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    container: Annotated[str | None, typer.Option("--container", "-c")] = None,
    interactive: Annotated[bool, typer.Option("--stdin", "-i", help="Pass stdin.")] = False,
    tty: Annotated[bool, typer.Option("--tty", "-t", help="Allocate a terminal.")] = False,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds before giving up (default: none).")
    ] = None,
) -> None:
    """Run a command in a Sandbox: ``exec NAME -- CMD ARGS...`` (``-it`` for a shell)."""
    command = list(ctx.args)
    with _errors():
        if not command:
            raise ValueError("give a command after --, e.g. agent-sandbox exec NAME -- ls /")
        client = state.client()
        if tty:
            code = _interactive(client, name, command, namespace=namespace, container=container)
            raise typer.Exit(code)
        data = sys.stdin.buffer.read() if interactive else None

        def stream(channel: int, chunk: bytes) -> None:
            target = sys.stdout if channel == execproto.STDOUT else sys.stderr
            target.buffer.write(chunk)
            target.flush()

        result = client.exec(
            name,
            command,
            namespace=namespace,
            container=container,
            stdin=data,
            timeout=timeout,
            on_output=stream,
        )
    raise typer.Exit(result.exit_code)


def _interactive(
    client: SandboxClient,
    name: str,
    command: list[str],
    *,
    namespace: str | None,
    container: str | None,
) -> int:
    """A raw-terminal session: stdin thread -> remote, remote -> stdout."""
    import termios
    import tty as tty_mod

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    with client.exec_session(
        name, command, namespace=namespace, container=container, stdin=True, tty=True
    ) as session:
        if saved is not None:
            size = os.get_terminal_size(fd)
            session.resize(size.columns, size.lines)
            tty_mod.setraw(fd)
        done = threading.Event()

        def pump_stdin() -> None:
            try:
                while not done.is_set():
                    data = os.read(fd, 1024)
                    if not data:
                        session.close_stdin()
                        return
                    session.write(data)
            except (OSError, SandboxError):
                return

        threading.Thread(target=pump_stdin, daemon=True).start()
        try:
            while True:
                chunk = session.read(None)
                if chunk is None:
                    break
                os.write(sys.stdout.fileno(), chunk[1])
        finally:
            done.set()
            if saved is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return session.exit_code if session.exit_code is not None else EXIT_ERROR


@app.command()
def cp(
    source: Annotated[str, typer.Argument(help="LOCAL or SANDBOX:/path.")],
    destination: Annotated[str, typer.Argument(help="LOCAL or SANDBOX:/path.")],
    namespace: Namespace = None,
    timeout: Timeout = 600.0,
) -> None:
    """Copy a file into or out of a Sandbox (streamed, binary safe)."""
    with _errors():
        src_box, src_path = output.split_remote(source)
        dst_box, dst_path = output.split_remote(destination)
        if (src_box is None) == (dst_box is None):
            raise ValueError("exactly one of SOURCE and DESTINATION must be SANDBOX:/path")
        client = state.client()
        if dst_box is not None:
            local = Path(src_path)
            if not local.is_file():
                raise ValueError(f"no such local file: {local}")
            with local.open("rb") as stream, _spinner(f"Copying to {destination}..."):
                client.write_file(dst_box, dst_path, stream, namespace=namespace, timeout=timeout)
        else:
            assert src_box is not None
            target = Path(dst_path)
            if target.is_dir():
                target = target / Path(src_path).name
            partial = target.with_name(target.name + ".partial")
            try:
                with partial.open("wb") as stream, _spinner(f"Copying {source}..."):
                    client.download(src_box, src_path, stream, namespace=namespace, timeout=timeout)
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)


@app.command()
def logs(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    container: Annotated[str | None, typer.Option("--container", "-c")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    tail: Annotated[int | None, typer.Option(help="Last N lines.")] = None,
) -> None:
    """Print the Sandbox Pod's log."""
    with _errors():
        client = state.client()
        for line in client.logs(
            name, namespace=namespace, container=container, follow=follow, tail_lines=tail
        ):
            out.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command("port-forward")
def port_forward(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    ports: Annotated[str, typer.Argument(help="[LOCAL:]REMOTE, e.g. 8888 or 9000:8888.")],
    namespace: Namespace = None,
    address: Annotated[str, typer.Option(help="Local address.")] = "127.0.0.1",
) -> None:
    """Forward a local port to a port of the Sandbox until interrupted."""
    from kube_agent_sandbox.sdk.portforward import PortForward

    with _errors():
        local, sep, remote = ports.rpartition(":")
        if not sep:
            local = remote
        if not remote.isdigit() or (local and not local.isdigit()):
            raise ValueError(f"ports must be [LOCAL:]REMOTE numbers, got {ports!r}")
        client = state.client()
        with PortForward(
            client,
            name,
            int(remote),
            local_port=int(local or 0),
            namespace=namespace,
            address=address,
        ) as forward:
            err.print(
                f"Forwarding from {address}:{forward.local_port} -> {remote}", highlight=False
            )
            with contextlib.suppress(KeyboardInterrupt):
                forward.serve_forever()


@app.command()
def suspend(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    wait: Annotated[bool, typer.Option(help="Wait until suspended.")] = True,
    timeout: Timeout = 180.0,
) -> None:
    """Suspend a Sandbox (its Pod is removed; volumes stay)."""
    with _errors():
        client = state.client()
        with _spinner(f"Suspending {name}...", enabled=wait):
            client.suspend(name, namespace=namespace, wait=wait, timeout=timeout)
        err.print(f"{name} suspended", highlight=False)


@app.command()
def resume(
    name: Annotated[str, typer.Argument(help="Sandbox name.")],
    namespace: Namespace = None,
    wait: Annotated[bool, typer.Option(help="Wait until Ready.")] = True,
    timeout: Timeout = 180.0,
) -> None:
    """Resume a suspended Sandbox."""
    with _errors():
        client = state.client()
        with _spinner(f"Resuming {name}...", enabled=wait):
            client.resume(name, namespace=namespace, wait=wait, timeout=timeout)
        err.print(f"{name} resumed", highlight=False)


@app.command()
def delete(
    names: Annotated[list[str], typer.Argument(help="Sandbox (or claim) names.")],
    namespace: Namespace = None,
    claim: Annotated[bool, typer.Option(help="NAMES are SandboxClaims.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait until gone.")] = False,
    ignore_not_found: Annotated[bool, typer.Option(help="A missing object is fine.")] = False,
    timeout: Timeout = 60.0,
) -> None:
    """Delete Sandboxes (or claims)."""
    with _errors():
        client = state.client()
        for name in names:
            with _spinner(f"Deleting {name}...", enabled=wait):
                if claim:
                    client.delete_claim(
                        name,
                        namespace=namespace,
                        wait=wait,
                        timeout=timeout,
                        missing_ok=ignore_not_found,
                    )
                else:
                    client.delete(
                        name,
                        namespace=namespace,
                        wait=wait,
                        timeout=timeout,
                        missing_ok=ignore_not_found,
                    )
            err.print(f"{name} deleted", highlight=False)


mcp_command.register(app, state)
top.register(app, state, _errors)
snapshot_command.register(app, state, _errors)

UNUSED_IMPORTS = ("httpx._main", "h2")
"""Modules httpx and httpcore load when installed, which this CLI never uses: httpx's own
command line (click, rich's progress bars, pygments: about 0.15 s of every start) and HTTP/2
(``h2``, brought into the development environment by ``e2b``; the SDK speaks HTTP/1.1)."""


def skip_unused_imports() -> None:
    """Keep :data:`UNUSED_IMPORTS` from loading in this process.

    A ``None`` entry in ``sys.modules`` makes an import of that name fail, and both libraries
    then fall back as if the extra were not installed: ``httpx.main`` only prints that its
    dependencies are missing, and ``httpcore`` refuses ``http2=True``. Neither is used here, and
    the process is the CLI's own (a library must not do this to its host program).
    """
    if "httpx" not in sys.modules:
        for name in UNUSED_IMPORTS:
            # None is the documented "cannot be imported" entry, which typeshed does not allow.
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main() -> None:
    """Console-script entry point."""
    skip_unused_imports()
    app()
