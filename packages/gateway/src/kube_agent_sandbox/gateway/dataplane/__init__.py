"""The gateway's data plane: requests addressed to one sandbox, proxied to its pod.

:class:`~kube_agent_sandbox.gateway.dataplane.router.DataPlane` is the ASGI app the gateway
mounts for requests that carry ``E2b-Sandbox-Id`` or a ``<port>-<id>.<domain>`` host: it finds
the pod, checks the sandbox's access token, records activity, resumes an idle-suspended sandbox
and streams the exchange (``proxy``; WebSockets: ``wsproxy``), or answers the envd surface over
``pods/exec`` for pods without ``sandboxd`` (``execfallback``).
"""
