"""The SandboxClaim controller: binds claims to warm or freshly created Sandboxes (spec 4.3)."""
