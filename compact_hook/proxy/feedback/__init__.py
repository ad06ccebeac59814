"""What comes back from the provider and is learned from, as evidence: a "too long" and its retry
(``recovery``), the usage of each response (``usage``), the windows and count ratios learned per
group and tenant (``learned``)."""
