"""Command-line flags of the cluster's components, merged by name.

The local cluster lets callers add flags to a component (``LocalClusterOptions.apiserver_args``)
and those flags must be able to override the harness's own: the real-node mode, for one,
replaces ``--advertise-address=127.0.0.1`` and ``--endpoint-reconciler-type=none``. Rather than
rely on "the last flag wins" inside the component, :func:`merge_flags` resolves overrides
before the process starts: for each flag name the last value given wins and takes the place
of the first occurrence, so the final command line names every flag exactly once and reads
like the harness's own list.

Flags are ``--name=value`` or a bare ``--name`` (a boolean). The separate ``--name value``
form is refused, since a bare word cannot be told apart from a boolean's neighbour; so are
single-dash flags (write ``--v=4`` rather than ``-v=4``). A flag that must appear several
times (a repeatable flag such as kube-apiserver's ``--tls-sni-cert-key``) cannot be expressed
through the merge; pass its values comma-separated where the component allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def flag_name(arg: str) -> str:
    """The name of a ``--name=value`` or ``--name`` flag.

    Args:
        arg: One command-line argument.

    Returns:
        The name, without dashes or value (``--secure-port=6443`` gives ``secure-port``).

    Raises:
        ValueError: If ``arg`` is not a ``--name[=value]`` flag.
    """
    name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
    if not name or name.startswith("-") or any(c.isspace() for c in name):
        raise ValueError(f"not a --name[=value] flag: {arg!r}")
    return name


def check_flags(args: Sequence[str], *, what: str) -> None:
    """Raise if ``args`` is not a sequence of ``--name[=value]`` flags.

    Args:
        args: The flags to check.
        what: What they are, for the error message (e.g. ``apiserver_args``).

    Raises:
        TypeError: If ``args`` is a single string instead of a sequence of flags.
        ValueError: If one element is not a ``--name[=value]`` flag.
    """
    if isinstance(args, str | bytes):
        raise TypeError(f"{what} must be a sequence of flags, not a single string: {args!r}")
    for arg in args:
        try:
            flag_name(arg)
        except ValueError as err:
            raise ValueError(f"{what}: {err}") from None


def merge_flags(*groups: Iterable[str]) -> list[str]:
    """Merge flag lists so that a later value of a flag replaces an earlier one.

    Args:
        *groups: Flag lists, lowest precedence first (e.g. the harness's, then the caller's).

    Returns:
        Every flag once, in order of first appearance, each with its last value.

    Raises:
        ValueError: If an element is not a ``--name[=value]`` flag.
    """
    merged: dict[str, str] = {}
    for group in groups:
        for arg in group:
            # Re-assigning a key keeps its position: the override takes the original's place.
            merged[flag_name(arg)] = arg
    return list(merged.values())
