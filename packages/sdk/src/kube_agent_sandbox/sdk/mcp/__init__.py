"""A Model Context Protocol server over sandboxes (``pip install kube-agent-sandbox-sdk[mcp]``).

The tools (:mod:`.tools`) are written once against :class:`.backend.SandboxBackend`; a backend
says how to reach sandboxes: the SDK with a kubeconfig (:mod:`.kube_backend`, what
``agent-sandbox mcp`` uses) or the gateway's E2B protocol (:mod:`.e2b_backend`, what the
gateway's ``/mcp`` endpoint and ``agent-sandbox mcp --gateway`` use). Nothing here is imported
by ``kube_agent_sandbox.sdk`` or the CLI until the ``mcp`` command runs.
"""
