"""The SandboxWarmPool controller: keeps ``spec.replicas`` ready-to-claim Sandboxes per pool.

Modules: :mod:`.reconciler` (the top-level flow of one pass over a pool), one module per step
of it (:mod:`.active` counts members, deletes the stale and adopts orphans; :mod:`.stuck`
deletes members not Ready in time; :mod:`.scale` refills and trims; :mod:`.status` writes the
status; :mod:`.progress` emits the not-progressing events), what the steps share
(:mod:`.passes` the per-pass record, :mod:`.deletes` the guarded deletes, :mod:`.settings` the
flags), the pure parts they build on (:mod:`.members` which Sandboxes count, staleness, stuck
detection; :mod:`.blueprint` the Sandbox a pool creates; :mod:`.refill` replenish hold and
refill rate; :mod:`.batches` slow-start batches; :mod:`.indexes` cache indexes) and
:mod:`.setup` (watches, caches, RBAC).
"""
