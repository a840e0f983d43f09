"""Extensions profile: SandboxTemplate, SandboxWarmPool, SandboxClaim.

See docs/guides/conformance.md.
"""
