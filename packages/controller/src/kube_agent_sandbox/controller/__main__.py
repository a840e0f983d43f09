"""``python -m kube_agent_sandbox.controller``: the ``agent-sandbox-controller`` command."""

from __future__ import annotations

import sys

from kube_agent_sandbox.controller.launcher import main

if __name__ == "__main__":
    sys.exit(main())
