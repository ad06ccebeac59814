"""Exceptions raised inside compact_hook.

Our exception hierarchy:

* CompactError
  * TokenizerError   - a tokenizer could not be found or loaded.
  * SummarizerError  - a summary call failed or answered nothing usable;
                       the engine retries, then gives up and leaves the request as it was.
  * ArchiveError     - the originals could not be written; logged, never fatal.
  * MalformedError   - a request we cannot read safely (nested deeper than we serialize);
                       it is forwarded untouched, reported ``malformed``.

Configuration mistakes raise plain ``ValueError`` (with the offending key in the message),
because they are the caller's programming error, not a runtime condition.
"""

from __future__ import annotations


class CompactError(Exception):
    """Root of every error compact_hook raises on purpose."""


class TokenizerError(CompactError):
    """A tokenizer name or path could not be resolved or loaded."""


class SummarizerError(CompactError):
    """A summary attempt failed: error from the model, timeout, or an empty answer."""


class ArchiveError(CompactError):
    """The summarized messages could not be archived."""


class MalformedError(CompactError):
    """A request we cannot read safely: forwarded exactly as sent, for the provider to judge."""
