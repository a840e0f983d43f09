"""Build CRIU from Debian's pinned source tarball into the testenv cache (``build --with-criu``).

The real node's checkpoint/restore needs a CRIU newer than Debian 12 ships (see
``versions.CRIU_VERSION``). Only the ``criu`` binary is built (``make criu``: no docs, no
plugins, no Python bindings); runc and containerd's shim call it through PATH.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from kube_agent_sandbox.testing import versions

# Debian 12 packages that ``make criu`` needs (headers, protobuf compilers, pkg-config).
BUILD_PACKAGES = (
    "build-essential",
    "pkgconf",
    "libbsd-dev",
    "libcap-dev",
    "libgnutls28-dev",
    "libnet1-dev",
    "libnftables-dev",
    "libnl-3-dev",
    "libprotobuf-c-dev",
    "libprotobuf-dev",
    "protobuf-c-compiler",
    "protobuf-compiler",
    "python3-protobuf",
    "uuid-dev",
)
# Commands the build runs; their absence is reported before a long download and compile.
_BUILD_TOOLS = ("make", "gcc", "pkg-config", "protoc", "protoc-c")


class CriuBuildError(RuntimeError):
    """CRIU could not be fetched or built; the message says what to do."""


def _log(message: str) -> None:
    print(f"[testenv-build {time.strftime('%H:%M:%S')}] {message}", flush=True)


def criu_version(binary: Path) -> str:
    """The version ``criu --version`` prints ('' when it does not run)."""
    if not binary.is_file():
        return ""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return ""
    for line in out.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return ""


def verify_source(tarball: Path, sha256: str) -> None:
    """Refuse a tarball whose digest is not the pinned one (a changed or truncated download)."""
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != sha256:
        raise CriuBuildError(
            f"{tarball.name}: SHA-256 {digest}, expected {sha256} (download changed or truncated)"
        )


def _download(url: str, dest: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=120) as response, dest.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as err:
        raise CriuBuildError(f"cannot download {url}: {err}") from err


def _missing_tools() -> list[str]:
    return [tool for tool in _BUILD_TOOLS if shutil.which(tool) is None]


def build_criu(bin_dir: Path) -> Path:
    """Install ``criu`` of ``versions.CRIU_VERSION`` into ``bin_dir`` unless it is there.

    Cold: about 30 s on 2 cores (plus a 1 MiB download). Returns the binary's path.
    """
    wanted = versions.CRIU_VERSION
    binary = bin_dir / "criu"
    if criu_version(binary) == wanted:
        _log(f"criu {wanted} present")
        return binary
    missing = _missing_tools()
    if missing:
        raise CriuBuildError(
            f"building criu needs {', '.join(missing)}: apt-get install {' '.join(BUILD_PACKAGES)}"
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="criu-build-") as tmp:
        work = Path(tmp)
        tarball = work / Path(versions.CRIU_SOURCE_URL).name
        _download(versions.CRIU_SOURCE_URL, tarball)
        verify_source(tarball, versions.CRIU_SOURCE_SHA256)
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(work)], check=True)
        source = work / f"criu-{wanted}"
        log = work / "make.log"
        _log(f"building criu {wanted} (cold: ~30 s on 2 cores)")
        with log.open("w") as out:
            done = subprocess.run(
                ["make", f"-j{os.cpu_count() or 1}", "criu"],
                cwd=source,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise CriuBuildError(
                f"make criu failed (exit {done.returncode}); missing headers? "
                f"apt-get install {' '.join(BUILD_PACKAGES)}\n{tail}"
            )
        bin_dir.mkdir(parents=True, exist_ok=True)
        # Copy then rename: a reader never sees a half-written binary.
        staged = bin_dir / ".criu.new"
        shutil.copy2(source / "criu" / "criu", staged)
        staged.replace(binary)
    got = criu_version(binary)
    if got != wanted:
        raise CriuBuildError(f"{binary} reports version {got!r}, expected {wanted}")
    _log(f"criu {wanted} built in {time.monotonic() - started:.0f}s")
    return binary
