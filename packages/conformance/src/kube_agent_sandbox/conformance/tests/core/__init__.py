"""Core profile: the Sandbox controller, on any nodes (docs/guides/conformance.md)."""
