"""Idle shutdown: suspend (or delete) a Sandbox whose heartbeat Lease went quiet.

Opt-in with ``--idle-shutdown`` (next to ``--extensions``). The policy lives in
``kube-agent-sandbox.io/`` annotations on the Sandbox (defaulted from its claim and template),
the heartbeat in a ``coordination.k8s.io/v1`` Lease of the same name; see
docs/guides/idle-shutdown.md.
"""
