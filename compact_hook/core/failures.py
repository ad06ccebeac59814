"""What kind of failure a model call ended in, and what a provider's "too long" says.

Pure: it reads an exception's class name, its ``status_code`` (LiteLLM's and the OpenAI and
Anthropic SDKs' errors carry one; httpx's carry a ``response``) and its words. The summary
engine decides per kind whether to retry (``engine.summary.summarize``); the proxy's recovery reads
the same "too long" sentences for the request itself (``proxy.feedback.recovery``).
"""

from __future__ import annotations

import asyncio
import enum
import re
from dataclasses import dataclass

from compact_hook.core.calibration import sample


class SummaryFailure(enum.StrEnum):
    """Why a summary could not be made; each kind has its own rule (``engine.summary.summarize``)."""

    TIMEOUT = "timeout"
    """The call took longer than its timeout: retried with backoff."""
    UNAVAILABLE = "unavailable"
    """429, 5xx, a dropped connection or an error we cannot place: retried with backoff."""
    REFUSED = "refused"
    """Authentication, permission, a model not found, any other 4xx: not retried, and the
    summary model's breaker opens at once (the next call would be refused the same way)."""
    TOO_LONG = "too_long"
    """The summary call itself was too long for the summary model: the chunk is planned again,
    smaller; never resent unchanged."""
    UNUSABLE = "unusable"
    """An empty answer (retried once) or one that is not a summary (``core.summary_check``: a loop,
    the prompt echoed, its sections missing; not retried): the digest takes its place."""
    DEADLINE = "deadline"
    """``summary_deadline_seconds`` passed."""
    BREAKER_OPEN = "breaker_open"
    """The summary model failed too often lately: not called."""


CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceeds the context window",
    "context window",
    "context limit",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "contextwindowexceedederror",
    "exceeds the available context size",  # llama.cpp's server
    "exceed_context_size_error",
)
LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (?P<limit>\d+) tokens.*?\((?P<sent>\d+) in the messages"),
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens.*?(?:resulted in|requested) (?P<sent>\d+) tokens"
    ),
    re.compile(r"prompt is too long: (?P<sent>\d+) tokens > (?P<limit>\d+) maximum"),
    re.compile(
        r"input token count \((?P<sent>\d+)\) exceeds the maximum number of tokens allowed \((?P<limit>\d+)\)"
    ),
    re.compile(r"(?P<sent>\d+) \+ \d+ > (?P<limit>\d+)"),
    re.compile(
        r"request \((?P<sent>\d+) tokens\) exceeds the available context size \((?P<limit>\d+) tokens\)"
    ),
    re.compile(r'"n_prompt_tokens":\s*(?P<sent>\d+),\s*"n_ctx":\s*(?P<limit>\d+)'),
    re.compile(r"maximum context length is (?P<limit>\d+) tokens.*?request has (?P<sent>\d+) input tokens"),
    re.compile(r"maximum context length is (?P<limit>\d+) tokens"),
)
"""The sentences that state a limit, most specific first: OpenAI's (and vLLM's, two forms), Anthropic's,
Gemini's, Anthropic's on Bedrock (input + max_tokens > limit), llama.cpp's server (its message and
its JSON fields), and OpenAI's without a count."""
SAFETY = 0.95
"""With a limit but not what the provider counted, the window is this share of the lower of the
limit and our estimate of what was sent (we may have under-counted: it was refused)."""
UNKNOWN_SHRINK = 0.8
"""With no limit in the error, the window is this share of our estimate of what was sent."""
REFUSED_NAMES = frozenset(
    {
        "AuthenticationError",
        "PermissionDeniedError",
        "NotFoundError",
        "BadRequestError",
        "UnprocessableEntityError",
    }
)
UNAVAILABLE_STATUS = frozenset({408, 409, 425, 429})


@dataclass(frozen=True, slots=True)
class Overflow:
    """What a context-length error says: the limit and the size the provider counted (if it does)."""

    limit: int | None = None
    sent: int | None = None

    @classmethod
    def parse(cls, text: str) -> Overflow:
        for pattern in LIMIT_PATTERNS:
            match = pattern.search(text)
            if match is not None:
                found = match.groupdict()
                return cls(int(found["limit"]), int(found["sent"]) if found.get("sent") else None)
        return cls()

    def window(self, estimated: int) -> int:
        """The window, in the provider's tokens, a retry must fit (``estimated``: our estimate of
        what was sent, in its tokens). The stated limit where the error also says what it counted
        (``ratio`` then makes our count right); else see ``SAFETY`` and ``UNKNOWN_SHRINK``."""
        if self.limit is not None and self.sent:
            return self.limit
        if self.limit is not None:
            return max(1, int(min(self.limit, estimated) * SAFETY))
        return max(1, int(estimated * UNKNOWN_SHRINK))

    def ratio(self, counted: int) -> float | None:
        """The provider's count of what was sent over ours (``counted``), where the error says it."""
        return sample(self.sent, counted) if self.sent else None


THROTTLE_PHRASES = (
    "rate limit",
    "ratelimit",
    "rate_limit",
    "too many requests",
    "throttl",
    "please wait",
    "try again later",
    "quota",
    "tokens per min",
    "per minute",
)
"""A throttle's words: Bedrock's "Too many tokens, please wait before trying again" reads like a
"too long" and is not one (opencode fixed the same misreading)."""
THROTTLE_NAMES = frozenset({"RateLimitError", "ThrottlingException", "ServiceUnavailableError"})


def is_context_error(exception: object) -> bool:
    """A provider's "too long": LiteLLM's own error type, or the words providers use for it — never
    a throttle (a 429, a rate-limit error, or a throttle's words), whatever else it says."""
    if is_throttle(exception):
        return False
    if type(exception).__name__ == "ContextWindowExceededError":
        return True
    text = str(exception).lower()
    return any(phrase in text for phrase in CONTEXT_PHRASES)


def is_throttle(exception: object) -> bool:
    """A rate limit, by its status (429), its class, or its words."""
    if isinstance(exception, BaseException) and _status(exception) == 429:
        return True
    if type(exception).__name__ in THROTTLE_NAMES:
        return True
    text = str(exception).lower()
    return any(phrase in text for phrase in THROTTLE_PHRASES)


def failure_of(exception: BaseException) -> SummaryFailure:
    """The kind of a failed model call; what we cannot place is retried (``UNAVAILABLE``)."""
    if isinstance(exception, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in type(exception).__name__:
        return SummaryFailure.TIMEOUT
    if is_context_error(exception):
        return SummaryFailure.TOO_LONG
    status = _status(exception)
    if status is not None:
        if status in UNAVAILABLE_STATUS or status >= 500:
            return SummaryFailure.UNAVAILABLE
        if 400 <= status < 500:
            return SummaryFailure.REFUSED
    if type(exception).__name__ in REFUSED_NAMES:
        return SummaryFailure.REFUSED
    return SummaryFailure.UNAVAILABLE


def _status(exception: BaseException) -> int | None:
    status = getattr(exception, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(exception, "response", None), "status_code", None)
    return status if isinstance(status, int) else None
