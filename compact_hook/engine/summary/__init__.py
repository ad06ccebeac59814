"""Tier 3, the summary: where to cut and the compaction made from the cut (``compaction``), the
summary call itself (``summarize``), made once across requests and replicas (``once``: single flight in
process, the store's lock leases across replicas), behind a breaker per summary model (``breaker``)."""
