"""Core profile: the Sandbox controller (spec section 3), on any nodes."""
