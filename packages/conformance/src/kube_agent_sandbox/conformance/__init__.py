"""Black-box conformance suite for the Agent Sandbox API.

The suite states the ``agents.x-k8s.io`` / ``extensions.agents.x-k8s.io`` contract as pytest
tests that talk only to the Kubernetes API, so the same run means the same thing against any
implementation: ours, upstream's, or another one installed in any cluster. Run it with the
``agent-sandbox-conformance`` command (:mod:`.runner`); tests live in :mod:`.tests` and use the
fixtures of :mod:`.plugin`.
"""

__version__ = "0.1.0"
