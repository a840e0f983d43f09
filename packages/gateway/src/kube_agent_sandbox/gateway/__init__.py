"""E2B-compatible HTTP gateway for Agent Sandbox.

Clients that speak E2B's API (the unmodified ``e2b`` and ``e2b-code-interpreter`` SDKs) use
sandboxes on a Kubernetes cluster through this ASGI service instead of the Kubernetes API: the
control plane maps E2B calls onto SandboxClaims, warm pools and Sandboxes, and the data plane
routes each request to the sandbox's pod, where ``sandboxd`` (or the exec fallback) answers.
"""

__version__ = "0.1.0"
