"""Every setting, declared once on its field (``setting``): the per-model ``CompactConfig``
(``model``), the process-wide ``ProcessConfig`` (``process``), their checks and the ``COMPACT_*``
environment (``checks``), and docs/configuration.md's tables generated from them (``reference``)."""
