"""Anthropic Messages (``/v1/messages``): format, recall tool, recall in streams, and the events of a
streamed answer of ours (``events``)."""
