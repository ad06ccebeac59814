"""The recall tool at the LiteLLM edge: offered with a compacted request, answered by the proxy.

``offer`` adds the tool to every request the hook compacts for and keeps what answering it needs
(``Pending``, on the request's own report) within the conversation's budget; ``rounds`` answers the
model's recall calls after the response comes back — looks each handle up, appends the call and its
answer, calls the model again through the router — hands the client the final answer only (a
streamed one through its wire's stream, ``wires.<wire>.stream``) and writes what was recalled into
the archive's audit. What each wire's tool, calls, follow-up and usage look like is the wire's
(``wires.<wire>.recall``); the handles, and the texts they name, are the core's (``core.recall``).
"""

from compact_hook.proxy.recall.offer import MAX_ROUNDS, Offer, Pending
from compact_hook.proxy.recall.rounds import answered, audit_recalls, recalled_stream

__all__ = ["MAX_ROUNDS", "Offer", "Pending", "answered", "audit_recalls", "recalled_stream"]
