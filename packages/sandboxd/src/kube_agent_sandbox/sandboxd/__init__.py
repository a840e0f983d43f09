"""``sandboxd``: an envd-compatible daemon that runs inside a sandbox container.

It serves the envd surface E2B clients use (health, file upload and download, the process and
filesystem Connect RPC services) on port 49983, so commands and files work in any image with
Python, without the Kubernetes exec API and without a Go binary.
"""

__version__ = "0.1.0"
