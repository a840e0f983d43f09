"""The pod sandbox ("pause") image, compiled locally because no registry serves one here.

containerd's CRI plugin starts one infrastructure container per pod to hold its namespaces; it
only has to sleep, reap orphaned children and exit on SIGTERM or SIGINT. A static Go program
does that in a few kilobytes of source, and Go is already needed to build the cluster.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kube_agent_sandbox.testing.images.common import (
    ImageBuildError,
    cache_key,
    images_cache_dir,
    run,
)
from kube_agent_sandbox.testing.images.oci import Layer, pack_layer

PAUSE_SOURCE = """\
// pause: holds a pod's namespaces, reaps zombies, exits on SIGTERM/SIGINT.
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func reap() {
\tfor {
\t\tvar status syscall.WaitStatus
\t\tpid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
\t\tif pid <= 0 || err != nil {
\t\t\treturn
\t\t}
\t}
}

func main() {
\tsignals := make(chan os.Signal, 8)
\tsignal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor sig := range signals {
\t\tif sig == syscall.SIGCHLD {
\t\t\treap()
\t\t\tcontinue
\t\t}
\t\tos.Exit(0)
\t}
}
"""


def pause_layer() -> Layer:
    """The cached layer holding ``/pause``, compiled with Go on first use.

    Raises:
        ImageBuildError: If Go is missing or the build fails.
    """
    key = cache_key({"source": PAUSE_SOURCE})
    dest = images_cache_dir() / f"pause-{key}.layer.tar"
    cached = Layer.from_cache(dest)
    if cached is not None:
        return cached
    go = shutil.which("go")
    if go is None:
        raise ImageBuildError("Go is needed to compile the pod sandbox (pause) binary")
    with tempfile.TemporaryDirectory(prefix="pause-", dir=images_cache_dir()) as tmp:
        work = Path(tmp) / "src"
        work.mkdir()
        (work / "main.go").write_text(PAUSE_SOURCE)
        (work / "go.mod").write_text("module agent-sandbox.testenv/pause\n\ngo 1.21\n")
        root = Path(tmp) / "root"
        root.mkdir()
        env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
        run(
            [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(root / "pause"), "."],
            what="go build pause",
            env=env,
            cwd=work,
            timeout=600,
        )
        return pack_layer(root, dest, empty_dirs=())
