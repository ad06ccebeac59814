"""The LiteLLM edge: the hook, per-model settings from the router, the summary call through
the router, and the report (metadata and ``x-compact-*`` headers)."""
