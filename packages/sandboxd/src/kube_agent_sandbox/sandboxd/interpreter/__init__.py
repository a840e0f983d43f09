"""A code-interpreter server for ``e2b-code-interpreter`` clients, on port 49999.

E2B's own server sits in front of Jupyter; this one needs only Starlette and uvicorn: each
Python context is a persistent ``python3 -u`` worker (``driver.py``) that keeps globals between
executions and streams its output, and bash contexts run a shell per execution. ``app.py`` has
the HTTP surface (``/execute`` NDJSON, ``/contexts``, ``/health``), ``cli.py`` the console script
``sandboxd-interpreter``.
"""
