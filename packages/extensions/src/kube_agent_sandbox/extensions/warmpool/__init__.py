"""The SandboxWarmPool controller: keeps ``spec.replicas`` ready-to-claim Sandboxes per pool.

Modules: :mod:`.reconciler` (one pass over a pool), :mod:`.members` (which Sandboxes count,
staleness, stuck detection), :mod:`.blueprint` (the Sandbox a pool creates), :mod:`.refill`
(replenish hold and refill rate), :mod:`.batches` (slow-start create/delete batches),
:mod:`.status` (the status patch), :mod:`.progress` (the not-progressing events) and
:mod:`.setup` (watches, caches, RBAC).
"""
