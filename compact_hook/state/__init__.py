"""What outlives a request: the compaction store (memory, Redis), the archive, tokenizers."""
