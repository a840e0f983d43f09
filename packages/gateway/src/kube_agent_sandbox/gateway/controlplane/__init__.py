"""The E2B control-plane REST API, mapped onto SandboxClaims, warm pools and Sandboxes.

One module per concern: ``auth`` (API key -> tenant), ``models`` (request parsing and
response bodies), ``create``, ``lifecycle`` (connect, timeout, pause, kill), ``query`` (get,
list, metrics) and ``routes`` (the path table).
"""
