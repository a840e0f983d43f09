"""The hand-written asynchronous SDK; ``_sync`` is generated from it (scripts/unasync_sdk.py)."""
