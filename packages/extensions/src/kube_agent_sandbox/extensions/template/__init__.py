"""The SandboxTemplate controller: the template-ref-hash label and the template's NetworkPolicy."""
