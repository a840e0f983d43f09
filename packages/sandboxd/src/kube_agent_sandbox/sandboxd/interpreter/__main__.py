"""``python3 -m kube_agent_sandbox.sandboxd.interpreter``: the code-interpreter server."""

import sys

from kube_agent_sandbox.sandboxd.interpreter.cli import main

sys.exit(main())
