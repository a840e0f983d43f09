"""The gateway's TLS certificate and key: checked before serving, reloaded when renewed.

The server loads ``--tls-cert-file``/``--tls-key-file`` when it starts listening and would
report a problem as a bare ``ssl.SSLError`` traceback after the watch caches already
started. :func:`check_tls_files` loads the pair into a throwaway context first and turns
every failure (missing or unreadable file, not PEM, key not matching the certificate) into
one :class:`ValueError` that names the file, which the command line prints as a usage error.

:class:`CertificateReloader` then watches the two files (cert-manager renews a Secret whose
kubelet-mounted files change by an atomic symlink swap) and loads a changed pair into the
server's live :class:`ssl.SSLContext`: new handshakes get the new certificate, established
connections keep theirs. A pair that does not load (half written, key of another
certificate) is logged and counted, and the previous certificate stays in use.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from cryptography import x509

from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.metrics import TLS_RELOAD_FAILED, TLS_RELOAD_OK, GatewayMetrics
from kube_agent_sandbox.gateway.periodic import Periodic

logger = logging.getLogger(__name__)

DEFAULT_TLS_RELOAD_INTERVAL_SECONDS: Final = 5.0
"""How often the certificate and key files are checked for a change."""


def _readable(path: str, flag: str) -> None:
    if not os.path.exists(path):
        raise ValueError(f"{flag} {path}: no such file")
    if not os.path.isfile(path):
        raise ValueError(f"{flag} {path}: not a regular file")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot be read: {err.strerror or err}") from None


def check_tls_files(options: GatewayOptions) -> None:
    """Verify that ``options`` name a loadable certificate and key (no-op without TLS).

    Args:
        options: The gateway's settings.

    Raises:
        ValueError: if a file is missing or unreadable, or the pair cannot be loaded.
    """
    if options.tls_cert_file is None or options.tls_key_file is None:
        return
    _readable(options.tls_cert_file, "--tls-cert-file")
    _readable(options.tls_key_file, "--tls-key-file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key gets an empty password (and fails) instead of a terminal prompt.
        context.load_cert_chain(options.tls_cert_file, options.tls_key_file, password=b"")
    except ssl.SSLError as err:
        reason = err.reason or err.strerror or str(err)
        raise ValueError(
            f"TLS certificate {options.tls_cert_file} and key {options.tls_key_file} cannot"
            f" be loaded ({reason}): both must be PEM and the key must match the certificate"
        ) from None
    except OSError as err:  # pragma: no cover - a race between the checks above and here
        raise ValueError(f"TLS files cannot be read: {err}") from None


_Signature = tuple[tuple[int, int, int, int], tuple[int, int, int, int]]


def _signature(cert_file: str, key_file: str) -> _Signature:
    """Device, inode, size and mtime of both files (following symlinks): changes on renewal."""

    def of(path: str) -> tuple[int, int, int, int]:
        st = os.stat(path)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    return of(cert_file), of(key_file)


@contextlib.contextmanager
def _pem_paths(cert_pem: bytes, key_pem: bytes) -> Iterator[tuple[str, str]]:
    """Paths ``load_cert_chain`` can read the given bytes from, gone afterwards.

    Both files are read once and loaded from these copies, so the pair that was checked is
    the pair that is served even if the originals change in between. On Linux the copies are
    anonymous memory files (nothing written to disk, works on a read-only root filesystem).
    """
    memfd_create: Callable[[str], int] | None = getattr(os, "memfd_create", None)
    if memfd_create is not None and Path("/proc/self/fd").is_dir():
        fds: list[int] = []
        try:
            for name, data in (("tls.crt", cert_pem), ("tls.key", key_pem)):
                fd = memfd_create(name)
                fds.append(fd)
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="gateway-tls-") as folder:  # pragma: no cover
        cert_path, key_path = Path(folder, "tls.crt"), Path(folder, "tls.key")
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key_pem)
        yield str(cert_path), str(key_path)


def _describe(cert_pem: bytes) -> tuple[str, dt.datetime | None]:
    """The serial number (hex) and expiry of the first certificate in ``cert_pem``."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:  # pragma: no cover - it just loaded into an SSLContext
        return "?", None
    return f"{cert.serial_number:x}", cert.not_valid_after_utc


class CertificateReloader:
    """Keeps a server's live :class:`ssl.SSLContext` in step with its certificate files.

    Call :meth:`watch` with the context the server listens with (right after it loaded the
    files), then :meth:`check` every few seconds (:meth:`start` runs it as a
    :class:`~.periodic.Periodic`). ``load_cert_chain`` on the live context changes what new
    handshakes present; connections already established keep the certificate they got.

    Args:
        cert_file: The PEM certificate (chain) file.
        key_file: The PEM private key file.
        metrics: Where reloads are counted and the served certificate's expiry is shown.
        interval: Seconds between checks.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        metrics: GatewayMetrics | None = None,
        interval: float = DEFAULT_TLS_RELOAD_INTERVAL_SECONDS,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.metrics = metrics
        self._context: ssl.SSLContext | None = None
        self._signature: _Signature | str | None = None
        self._periodic = Periodic("tls-certificate-reload", interval, self._tick)

    def context_factory(
        self, _config: object, default: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        """A uvicorn ``ssl_context_factory``: the server's own context, watched from now on."""
        signature = self._current()  # before loading: a change during the load is seen later
        context = default()
        self.watch(context, signature=signature)
        return context

    def watch(self, context: ssl.SSLContext, *, signature: _Signature | str | None = None) -> None:
        """Reload into ``context`` from now on (it holds the files' current contents)."""
        self._context = context
        self._signature = self._current() if signature is None else signature
        try:
            with open(self.cert_file, "rb") as handle:
                _, not_after = _describe(handle.read())
        except OSError:  # pragma: no cover - it was just loaded
            return
        self._served(not_after)

    def _current(self) -> _Signature | str:
        try:
            return _signature(self.cert_file, self.key_file)
        except OSError as err:
            return f"cannot be read: {err.strerror or err}"

    def check(self) -> bool | None:
        """Reload if the files changed.

        Returns:
            True when a new pair was loaded, False when a changed pair was refused (the
            previous certificate stays), None when nothing changed (or the files are being
            written right now: the next check sees them finished).
        """
        context = self._context
        if context is None:
            return None
        before = self._current()
        if before == self._signature:
            return None
        if isinstance(before, str):
            return self._refuse(before, before)
        try:
            cert_pem = Path(self.cert_file).read_bytes()
            key_pem = Path(self.key_file).read_bytes()
        except OSError as err:
            return self._refuse(before, f"cannot be read: {err.strerror or err}")
        if self._current() != before:
            return None  # still being written
        try:
            with _pem_paths(cert_pem, key_pem) as (cert_path, key_path):
                # A throwaway context first: a failed load can leave a context half changed.
                probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                probe.load_cert_chain(cert_path, key_path, password=b"")
                context.load_cert_chain(cert_path, key_path, password=b"")
        except (ssl.SSLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or str(err)
            return self._refuse(before, str(reason))
        self._signature = before
        serial, not_after = _describe(cert_pem)
        logger.info(
            "reloaded TLS certificate %s (serial %s, expires %s)",
            self.cert_file,
            serial,
            not_after.isoformat() if not_after else "?",
        )
        if self.metrics is not None:
            self.metrics.tls_reloads_total.labels(TLS_RELOAD_OK).inc()
        self._served(not_after)
        return True

    def _refuse(self, signature: _Signature | str, reason: str) -> bool:
        self._signature = signature  # logged once per change, retried when the files change
        logger.error(
            "TLS certificate %s and key %s not reloaded (%s); still serving the previous"
            " certificate",
            self.cert_file,
            self.key_file,
            reason,
        )
        if self.metrics is not None:
            self.metrics.tls_reloads_total.labels(TLS_RELOAD_FAILED).inc()
        return False

    def _served(self, not_after: dt.datetime | None) -> None:
        if self.metrics is not None and not_after is not None:
            self.metrics.tls_certificate_expiry.set(not_after.timestamp())

    async def _tick(self) -> None:
        # In the event loop's thread: the live context must not change under a handshake.
        self.check()

    async def start(self) -> None:
        """Check every ``interval`` seconds until :meth:`stop`."""
        await self._periodic.start()

    async def stop(self) -> None:
        """Stop checking."""
        await self._periodic.stop()
