"""The web console: a page listing a tenant's sandboxes, claims and pools, served by the gateway.

``GET /console/`` is a static page (plain HTML, CSS and JavaScript shipped in the wheel: no
build step, no CDN). It asks for the tenant's API key and sends it as ``X-API-KEY`` with every
request to ``/console/api/...``; the answers come from the gateway's informer caches
(:mod:`.view`), change by change through a long poll (:mod:`.routes`). Events and the last log
lines of one sandbox are read from the API server on demand (:mod:`.details`).
"""
