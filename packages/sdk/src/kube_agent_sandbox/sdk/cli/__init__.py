"""The ``agent-sandbox`` command line (typer + rich) on top of the sync SDK client."""
