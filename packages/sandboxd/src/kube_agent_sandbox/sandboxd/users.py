"""Which OS user a request acts as, and how paths are resolved for that user.

envd runs as root and acts as the sandbox's default user (``user``, home ``/home/user``) unless a
request names another one (``Authorization: Basic base64("<name>:")`` on RPCs, ``username`` on
``/files``). The daemon may also run unprivileged (tests, images without root); then every
request acts as the daemon's own user, since it cannot switch identity.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import posixpath
import pwd
from dataclasses import dataclass


class UnknownUserError(Exception):
    """The request named a user that does not exist (or was malformed)."""


class BadPathError(Exception):
    """A path the daemon refuses (empty, NUL byte, not text)."""


@dataclass(frozen=True)
class User:
    """An OS identity processes and file operations use."""

    name: str
    uid: int
    gid: int
    home: str
    shell: str

    @property
    def switch(self) -> bool:
        """Whether acting as this user needs a uid/gid change (daemon is root, user is not)."""
        return os.geteuid() == 0 and self.uid != 0


def _from_entry(entry: pwd.struct_passwd) -> User:
    return User(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        home=entry.pw_dir or "/",
        shell=entry.pw_shell or "/bin/sh",
    )


def current_user() -> User:
    """The identity the daemon itself runs as, its home ``$HOME`` when set.

    ``$HOME`` first, as a shell's ``~`` (and Python's ``expanduser``) does: the daemon's
    environment is what its own processes get, and what a container runtime or a test
    harness (one daemon and home per sandbox) configures.
    """
    uid = os.geteuid()
    home = os.environ.get("HOME")
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return User(name=str(uid), uid=uid, gid=os.getegid(), home=home or "/", shell="/bin/sh")
    user = _from_entry(entry)
    return dataclasses.replace(user, home=home) if home else user


def lookup(name: str) -> User | None:
    """The user with this name, or None."""
    if not name or "\x00" in name:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return _from_entry(entry)


def resolve_user(requested: str | None, *, default_user: str | None) -> User:
    """The identity a request acts as.

    An explicitly requested user must exist. Without one, the default user is used when it
    exists, else the daemon's own user. Only a root daemon switches identity: an unprivileged
    daemon acts as itself whatever is asked (it could not do otherwise).

    Raises:
        UnknownUserError: ``requested`` names no user.
    """
    me = current_user()
    if requested:
        user = lookup(requested)
        if user is None:
            raise UnknownUserError(f"user {requested!r} does not exist")
        return user if os.geteuid() == 0 else me
    if default_user and os.geteuid() == 0:
        user = lookup(default_user)
        if user is not None:
            return user
    return me


def user_from_basic_auth(header: str | None) -> str | None:
    """The user name in an ``Authorization: Basic base64("<name>:")`` header, if any.

    Raises:
        UnknownUserError: the header is present but malformed.
    """
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise UnknownUserError("malformed Basic authorization header") from exc
    name, _, _password = decoded.partition(":")
    return name or None


def resolve_path(path: str, user: User) -> str:
    """An absolute, normalised path for a request path.

    ``~`` and ``~/...`` expand to the user's home; a relative path is taken relative to the
    user's home (envd's rule). ``..`` is resolved lexically and cannot climb above ``/``. The
    daemon does not confine paths: the container is the boundary, exactly as with envd.

    Raises:
        BadPathError: empty, or containing a NUL byte.
    """
    if not path:
        raise BadPathError("path is required")
    if "\x00" in path:
        raise BadPathError("path contains a NUL byte")
    if path == "~":
        path = user.home
    elif path.startswith("~/"):
        path = posixpath.join(user.home, path[2:])
    elif not path.startswith("/"):
        path = posixpath.join(user.home, path)
    normalised = posixpath.normpath(path)
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    return normalised
