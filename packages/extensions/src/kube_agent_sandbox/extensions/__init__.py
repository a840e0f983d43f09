"""SandboxTemplate, SandboxWarmPool and SandboxClaim controllers (enabled with --extensions)."""

__version__ = "0.1.0"
