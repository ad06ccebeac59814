"""Compactions prepared ahead: made in the background while the agent works (``prepare``, on
``background``'s bounded workers), looked up by the compactor (``lookup``), counted per conversation
(``tally``: prepared, applied, left unused)."""
