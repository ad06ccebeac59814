"""Typed outcomes: what a request's compaction did, as values the report renders.

``StrEnum`` values are exactly what the ``x-compact-*`` headers and the metadata report
carry, so nothing is ever parsed back from a string.
"""

from __future__ import annotations

import enum


class CacheStatus(enum.StrEnum):
    HIT = "hit"
    """State remembered from an earlier request was reused: no summary call."""
    MISS = "miss"
    """A new summary was made for this request."""
    SHARED = "shared"
    """The summary was made by a concurrent request or another replica."""
    NONE = "none"
    """No remembered state is involved."""
    PREPARED = "prepared"
    """A compaction prepared in the background on an earlier turn was applied: no wait."""


class Preparation(enum.StrEnum):
    """Where this conversation's next compaction stands (``x-compact-prepare``), once the request
    is past ``prepare_ratio`` of the window and under the trigger."""

    STARTED = "started"
    """This request started preparing it in the background."""
    RUNNING = "running"
    """It is being prepared (or waits for a free slot) in this process."""
    READY = "ready"
    """It is prepared and waits for the trigger."""


class Reason(enum.StrEnum):
    """Why nothing (new) was compacted, or what else happened to the request."""

    BELOW_THRESHOLD = "below_threshold"
    NOTHING_TO_SUMMARIZE = "nothing_to_summarize"
    SUMMARY_FAILED = "summary_failed"
    WINDOW_UNKNOWN = "window_unknown"
    MALFORMED = "malformed"
    CLIENT_MANAGED = "client_managed"
    """The client manages its own context (Responses ``previous_response_id``, Anthropic
    ``context_management`` or compaction blocks): forwarded untouched."""
    FITTED = "fitted"
    CANNOT_FIT = "cannot_fit"
    OVER_WINDOW = "over_window"
    """Over the window and ``on_overflow: passthrough``: forwarded as sent."""
    DISABLED = "disabled"
    EMPTY = "empty"
    OFF = "off"
    """The request (or its key or team) said ``off``: forwarded exactly as sent."""
    BREAKER_OPEN = "breaker_open"
    """The summary model failed ``breaker_failures`` times in a row: not called for a while."""
    NO_ROOM = "no_room"
    """The output reserve (``max_tokens``) with the system and tools fills the whole window:
    nothing is left for the messages, so the request is forwarded as sent (logged once)."""
    OVER_TRIGGER = "over_trigger"
    """A compaction was made but what it must keep (head, kept messages, tail) is still over
    the trigger: forwarded (it fits the window), said so rather than compacting every turn."""


class Mode(enum.StrEnum):
    """What the request asks of compaction (header ``x-compact``, metadata ``compact``)."""

    AUTO = "auto"
    """Compact when the thresholds say so."""
    FORCE = "force"
    """Compact now, under the threshold too, when there is a middle to summarize."""
    OFF = "off"
    """Forward exactly as sent: no tier touches the request."""


class Summarizer(enum.StrEnum):
    MODEL = "model"
    DIGEST = "digest"
    """The built-in digest: facts copied from the messages, no model call."""


class Removal(enum.StrEnum):
    """Why the client's entries left the model's view (the archive's audit says which)."""

    SUMMARIZED = "summarized"
    DROPPED = "dropped"
    """Fitted to the window: dropped whole, or shrunk (the original kept here)."""
    NORMALIZED = "normalized"
    """An orphaned tool call or result the provider would reject."""
    RECALLED = "recalled"
    """Nothing removed: the model read outputs back (``recall``); the audit lists the handles asked for."""


class ArchiveStatus(enum.StrEnum):
    """What became of the archive this request had to write (``x-compact-archive``)."""

    WRITTEN = "written"
    FAILED = "failed"
    """Nothing is lost from the client's view of it, but the originals were not kept: reported,
    remembered with the compaction, and retried on a later turn."""
