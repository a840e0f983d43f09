"""Typed models of the Agent Sandbox API (agents.x-k8s.io and extensions.agents.x-k8s.io).

The pydantic models here are the source of truth: CRDs are generated from them, and the
controller, extensions and SDK all speak them.
"""

__version__ = "0.1.0"
