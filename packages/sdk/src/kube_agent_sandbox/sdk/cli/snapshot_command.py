"""``agent-sandbox snapshot``: take, list, show and delete SandboxSnapshots, and claim a new
sandbox from one (docs/guides/snapshots.md).

Its own module registered on the CLI's app, as ``mcp`` and ``top`` are; it shares the app's
client, error-to-exit-code mapping and output formats.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kube_agent_sandbox.sdk.cli import output

if TYPE_CHECKING:
    from kube_agent_sandbox.sdk.cli.app import State

Errors = Callable[[], AbstractContextManager[None]]
Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table, wide, json, yaml or name.")]


def _emit(objs: Any, fmt: str) -> None:
    if fmt not in output.FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(output.FORMATS)}")
    if fmt in ("table", "wide"):
        items = [objs] if isinstance(objs, dict) else list(objs)
        if not items:
            typer.echo("No resources found.", err=True)
            return
        typer.echo(output.snapshot_table(items, wide=fmt == "wide"))
        return
    typer.echo(output.serialize(objs, fmt, list_kind="SandboxSnapshotList"))


def register(app: typer.Typer, state: State, errors: Errors) -> None:
    """Add the ``snapshot`` command group to ``app``."""
    group = typer.Typer(
        name="snapshot", help="Snapshots of running sandboxes.", no_args_is_help=True
    )
    app.add_typer(group)

    @group.command("create")
    def create(
        sandbox: Annotated[str, typer.Argument(help="The running Sandbox.")],
        name: Annotated[str | None, typer.Option(help="Snapshot name.")] = None,
        namespace: Namespace = None,
        mode: Annotated[
            str, typer.Option(help="Filesystem, or Memory (processes too, where nodes can).")
        ] = "Filesystem",
        warm_pool: Annotated[
            str | None, typer.Option(help="Pool a claim from it uses (default: the source's).")
        ] = None,
        wait: Annotated[bool, typer.Option(help="Wait until Ready.")] = True,
        timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 300.0,
        fmt: OutputOpt = "name",
    ) -> None:
        """Snapshot a running Sandbox (it keeps running) and print the snapshot."""
        with errors():
            obj = state.client().create_snapshot(
                sandbox,
                name=name,
                namespace=namespace,
                mode=mode,
                warm_pool=warm_pool,
                wait=wait,
                timeout=timeout,
            )
            _emit(obj, fmt)

    @group.command("list")
    def list_(
        namespace: Namespace = None,
        sandbox: Annotated[str | None, typer.Option(help="Only snapshots of this Sandbox.")] = None,
        fmt: OutputOpt = "table",
    ) -> None:
        """List SandboxSnapshots like ``kubectl get``."""
        with errors():
            _emit(state.client().list_snapshots(namespace=namespace, sandbox=sandbox), fmt)

    @group.command("get")
    def get(
        name: Annotated[str, typer.Argument(help="Snapshot name.")],
        namespace: Namespace = None,
        fmt: OutputOpt = "table",
    ) -> None:
        """Show one SandboxSnapshot."""
        with errors():
            _emit(state.client().get_snapshot(name, namespace=namespace), fmt)

    @group.command("delete")
    def delete(
        name: Annotated[str, typer.Argument(help="Snapshot name.")],
        namespace: Namespace = None,
        wait: Annotated[
            bool, typer.Option(help="Wait until gone (its image deleted from the registry).")
        ] = False,
        timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 60.0,
    ) -> None:
        """Delete a SandboxSnapshot; its image is deleted from the registry."""
        with errors():
            state.client().delete_snapshot(name, namespace=namespace, wait=wait, timeout=timeout)
            typer.echo(f"snapshot {name} deleted", err=True)

    @group.command("claim")
    def claim(
        snapshot: Annotated[str, typer.Argument(help="The SandboxSnapshot to start from.")],
        name: Annotated[str | None, typer.Option(help="Claim name.")] = None,
        namespace: Namespace = None,
        warm_pool: Annotated[
            str | None, typer.Option(help="Pool to claim from (default: the one it recorded).")
        ] = None,
        pull_secret: Annotated[
            str | None, typer.Option(help="dockerconfigjson Secret to pull its image with.")
        ] = None,
        wait: Annotated[bool, typer.Option(help="Wait until Ready.")] = True,
        timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 180.0,
    ) -> None:
        """Claim a new Sandbox running the snapshot's image; print the Sandbox (or claim)."""
        with errors():
            options: dict[str, Any] = {"name": name} if name else {}
            box = state.client().claim_from_snapshot(
                snapshot,
                namespace=namespace,
                warm_pool=warm_pool,
                pull_secret=pull_secret,
                wait=wait,
                timeout=timeout,
                **options,
            )
            typer.echo(box.name if wait else box.claim_name)
