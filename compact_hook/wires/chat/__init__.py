"""OpenAI chat completions (``/v1/chat/completions``): format, recall tool, recall in streams."""
