"""Google GenAI ``generateContent``: format, recall tool, recall in streams."""
