"""``python -m kube_agent_sandbox.sandboxd``: the same as the ``sandboxd`` console script."""

from kube_agent_sandbox.sandboxd.cli import main

if __name__ == "__main__":
    main()
