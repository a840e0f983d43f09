"""The synchronous SDK, generated from ``_async`` by scripts/unasync_sdk.py (do not edit)."""
