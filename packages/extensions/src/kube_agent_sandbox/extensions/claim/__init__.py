"""The SandboxClaim controller: binds claims to warm or freshly created Sandboxes.

See docs/concepts/claims.md.
"""
