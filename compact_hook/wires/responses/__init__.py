"""OpenAI Responses (``/v1/responses``): format, recall tool, recall in streams, and Codex's
compaction item (``compaction``)."""
