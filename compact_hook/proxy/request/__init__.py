"""The pre-call path: ``gate`` runs it in steps; who a request is from and the engine request built
for it (``caller``), what it asks of compaction (``control``), the group's settings and prices
(``models``, ``settings``: resolved once per request), the summary call through the
router (``summarizer``)."""
