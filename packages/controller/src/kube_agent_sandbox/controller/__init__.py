"""The Agent Sandbox controller: keeps one Pod, optional Service and PVCs per Sandbox."""

__version__ = "0.1.0"
