"""The proxy's own answers, no model called: ``/compact`` (``compact``) and Codex's compaction
(``codex``: the mementos our items stand for, kept in the store and expanded before anything reads
a request)."""
