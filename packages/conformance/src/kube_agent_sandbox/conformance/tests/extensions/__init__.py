"""Extensions profile: SandboxTemplate, SandboxWarmPool, SandboxClaim (spec section 4)."""
