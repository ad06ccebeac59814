"""The cheap tiers as stages: tier 1 cuts long tool outputs (``truncation``), tier 2 clears old tool
results in batches (``clearing``)."""
