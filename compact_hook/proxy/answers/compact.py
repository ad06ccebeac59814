"""The proxy's own answer to ``/compact``: a short report, in the request's format, no model call.

LiteLLM answers a ``ModifyResponseException`` raised by a pre-call hook with a 200 in the
endpoint's format (chat, /v1/messages, /v1/responses; streaming too) and calls no provider.
Its Google endpoints turn that exception into a 500; ``generateContent`` answers a
``mock_response`` instead (a ``GenerateContentResponse``, no provider called), but
``streamGenerateContent`` ignores it and calls the provider: there the command cannot be
answered by the proxy (``answerable``), so it compacts now and goes on to the model.
Up to 1.108, the one shape it gets wrong is a streamed /v1/messages answer: it hands the whole
message to the streaming iterator hook as one chunk (one ``data:`` line), and
``answered_stream`` turns that chunk into the Messages SSE events the Anthropic SDK expects.
1.109 builds those events itself and never passes the answer through the iterator hook.

The mend is gated by capability, not by version: it acts only on a chunk that is a whole
``message`` in a stream we answered, which is exactly what the older releases hand us; on a
release that streams the answer properly there is no such chunk and nothing is touched.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from typing import Any

from litellm.exceptions import ModifyResponseException

from compact_hook.core.outcomes import ArchiveStatus, Reason
from compact_hook.engine.result import CompactResult
from compact_hook.proxy.answers.codex import CompactionAnswer
from compact_hook.proxy.observe.report import ANSWERED, report_in
from compact_hook.wires.anthropic.stream import anthropic_events, is_whole_message
from compact_hook.wires.responses.compaction import compaction_events, compaction_response

ARCHIVE_WORDS = {
    ArchiveStatus.WRITTEN: " Originals archived.",
    ArchiveStatus.FAILED: " The originals could not be archived.",
}


def answer_text(result: CompactResult) -> str:
    """What the user reads after ``/compact``."""
    before, after = f"{result.input_tokens:,}", f"{result.output_tokens:,}"
    if result.compacted and result.reason is not Reason.NOTHING_TO_SUMMARIZE:
        summarizer = f" by {result.summarizer.value}" if result.summarizer is not None else ""
        archive = ARCHIVE_WORDS.get(result.archive_status, "") if result.archive_status is not None else ""
        return (
            f"Compacted: {before} -> {after} tokens; {result.stats.compacted_message_count} messages "
            f"summarized{summarizer}.{archive} The next turns continue from the summary."
        )
    if result.reason is Reason.NOTHING_TO_SUMMARIZE:
        return f"Nothing to compact yet: the conversation ({before} tokens) is all kept verbatim."
    why = result.reason.value.replace("_", " ") if result.reason is not None else "nothing changed"
    return f"Not compacted ({why}); the conversation stays as it is ({before} tokens)."


MOCKED_CALL_TYPES = frozenset({"agenerate_content", "generate_content"})
"""Answered through ``mock_response``: LiteLLM's Google endpoint fails a ModifyResponseException."""
UNANSWERABLE_CALL_TYPES = frozenset({"agenerate_content_stream", "generate_content_stream"})
"""LiteLLM calls the provider whatever the hook says (1.106-1.110): no answer of ours reaches the client."""


def answerable(call_type: str) -> bool:
    """Whether the proxy can answer a request of this call type itself (no model call)."""
    return call_type not in UNANSWERABLE_CALL_TYPES


def answer(
    reply: str | CompactionAnswer, data: dict[str, Any], call_type: str
) -> ModifyResponseException | None:
    """The exception that makes LiteLLM answer ``reply`` for us, or None when ``data`` now asks
    LiteLLM to answer it (``mock_response``) and the request must be returned as it is.

    Codex's compaction is delivered by the response hooks (``delivered``, ``answered_stream``), in
    place of what the model answers to a ping the request becomes (``as_ping``): LiteLLM's own answer
    to a ``ModifyResponseException`` can only be a message, and its Responses ``mock_response`` is
    never a stream the hooks can rewrite (1.106-1.110: other hooks iterate it first and fail).
    """
    if isinstance(reply, CompactionAnswer):
        as_ping(data)
        return None
    if call_type in MOCKED_CALL_TYPES:
        data["mock_response"] = reply
        return None
    return ModifyResponseException(message=reply, model=str(data.get("model")), request_data=data)


async def answered_stream(
    response: AsyncIterable[Any], request_data: Mapping[str, Any]
) -> AsyncGenerator[Any, None]:
    """The stream as LiteLLM made it, but for a whole message in the stream of our own answer:
    that one becomes the Messages events."""
    report = report_in(request_data)
    if report is not None and report.compaction is not None:  # Codex's: the ping's reply is never shown
        async for _ in response:
            pass
        answer = report.compaction
        for event in compaction_events(answer.handle, str(request_data.get("model")), answer.usage):
            yield event.encode()  # bytes: LiteLLM passes a whole SSE frame through as it is
        return
    mend = report is not None and bool(report.get(ANSWERED))
    async for chunk in response:
        if mend and is_whole_message(chunk):
            for event in anthropic_events(chunk):
                yield event
        else:
            yield chunk


PING_INPUT = "Reply with the word: ok"
PING_TOKENS = 16
"""The smallest reply every Responses provider accepts (OpenAI's floor is 16)."""
KEPT_FOR_PING = frozenset({"model", "stream", "store", "user"})
"""Kept besides LiteLLM's own fields (``_proxy_field``): what routes and bills the ping."""


def as_ping(data: dict[str, Any]) -> None:
    """The trigger request made the smallest the model can answer (a few dozen tokens): its reply is
    never read, only replaced. Everything the model would read is dropped, LiteLLM's own fields
    (the proxy's, a few ``litellm_``-prefixed or private keys) kept."""
    for key in [k for k in data if k not in KEPT_FOR_PING and not _proxy_field(k)]:
        del data[key]
    data["input"] = [{"role": "user", "content": PING_INPUT}]
    data["max_output_tokens"] = PING_TOKENS


def _proxy_field(key: str) -> bool:
    return key.startswith(("litellm", "_", "proxy_server_request", "secret_fields")) or key in (
        "metadata",
        "user_api_key_dict",
    )


def delivered(request_data: Mapping[str, Any], response: Any) -> Any:
    """A whole (non-streamed) response, Codex's compaction answer put in place of the ping's reply
    (``as_ping``); None: the response is not ours to change."""
    report = report_in(request_data)
    if report is None or report.compaction is None:
        return None
    answer = report.compaction
    return compaction_response(answer.handle, str(request_data.get("model")), answer.usage)
