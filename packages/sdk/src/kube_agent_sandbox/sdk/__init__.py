"""Client SDK for Agent Sandbox (async first, sync generated from it)."""

__version__ = "0.1.0"
