"""The sandbox's global environment variables, read from envd (``GET /envs`` on port 49983).

``Sandbox.create(envs=...)`` hands the variables to envd's ``/init``; E2B's code interpreter
reads them back from envd on a context's first execution (with the caller's ``X-Access-Token``)
and sets them in the context. This does the same with the standard library only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_SECONDS = 2.0
MAX_ENVS_BYTES = 1024 * 1024


def _fetch(url: str, token: str | None) -> dict[str, str] | None:
    headers = {"X-Access-Token": token} if token else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # envd is local
    try:
        request = urllib.request.Request(url, headers=headers)
        with opener.open(request, timeout=FETCH_TIMEOUT_SECONDS) as response:
            raw = response.read(MAX_ENVS_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        logger.info("no global env vars from %s: %s", url, exc)
        return None
    if len(raw) > MAX_ENVS_BYTES:
        logger.warning("global env vars from %s are larger than %d bytes", url, MAX_ENVS_BYTES)
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        logger.warning("global env vars from %s are not JSON: %s", url, exc)
        return None
    if not isinstance(data, dict):
        logger.warning("global env vars from %s are not a JSON object", url)
        return None
    return {
        str(key): value
        for key, value in data.items()
        if isinstance(value, str) and key and "=" not in key and "\x00" not in key + value
    }


async def fetch_global_env(envd_url: str, token: str | None) -> dict[str, str] | None:
    """Reads envd's ``/envs``.

    Args:
        envd_url: envd's base URL (e.g. ``http://127.0.0.1:49983``); empty disables the fetch.
        token: The access token to send, if the caller gave one.

    Returns:
        The variables, or None when envd is not there or answered something unusable.
    """
    if not envd_url:
        return None
    return await asyncio.to_thread(_fetch, envd_url.rstrip("/") + "/envs", token)
