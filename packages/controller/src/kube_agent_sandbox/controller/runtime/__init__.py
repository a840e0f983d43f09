"""A small controller runtime on asyncio, shaped after controller-runtime.

Generic: nothing in this package knows about Sandboxes or any other concrete API kind.
"""
