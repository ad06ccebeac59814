"""Exceptions raised inside compact_hook.

Our exception hierarchy:

* CompactError
  * TokenizerError   - a tokenizer could not be found or loaded.
  * SummarizerError  - a summary call failed or answered nothing usable;
                       the engine retries, then gives up and leaves the request as it was.
  * MalformedError   - a request we cannot read safely (nested deeper than we serialize);
                       it is forwarded untouched, reported ``malformed``.

Configuration mistakes raise plain ``ValueError`` (with the offending key in the message),
because they are the caller's programming error, not a runtime condition.
"""

from __future__ import annotations

from compact_hook.core.failures import SummaryFailure


class CompactError(Exception):
    """Root of every error compact_hook raises on purpose."""


class TokenizerError(CompactError):
    """A tokenizer name or path could not be resolved or loaded."""


class SummarizerError(CompactError):
    """A summary could not be made; ``kind`` says why, and so which rule applied
    (``core.failures.SummaryFailure``)."""

    def __init__(self, message: str, kind: SummaryFailure = SummaryFailure.UNAVAILABLE) -> None:
        super().__init__(message)
        self.kind = kind


class MalformedError(CompactError):
    """A request we cannot read safely: forwarded exactly as sent, for the provider to judge."""
