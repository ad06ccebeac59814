"""The sizes of one request's views: what each forwarded view holds, counted once.

Every stage asks the size of the views it builds, often again (the trigger, the fit, the report):
``Run.sizes`` is the request's one sizer.
"""

from __future__ import annotations

from compact_hook.core.counting import TokenCounter, item_strings, request_total
from compact_hook.engine.view import View


class Sizes:
    """Counts of one request's views: ``counts`` per item (synchronous: for planning and fitting,
    which run off the event loop), ``tokens`` in all (tokenizing a large batch off the loop).

    The one place the engine counts what a view holds: every stage asks the size of the views it
    builds, often again (the trigger, the fit, the report), so each view's counts are taken once —
    the counter's cache per entry, plus the request's fixed context (system, tools, output reserve),
    and the last view asked remembered (nearly always the next one asked). One slot each, replaced
    whole: a preparation's planning thread may ask while the request's own coroutine does."""

    def __init__(self, counter: TokenCounter, context_tokens: int) -> None:
        self.counter = counter
        self.context_tokens = context_tokens
        self._counts: tuple[View | None, list[int]] = (None, [])
        self._tokens: tuple[View | None, int] = (None, 0)

    def counts(self, view: View) -> list[int]:
        """Tokens of each of the view's items (framing included)."""
        last, counts = self._counts
        if last is not view:
            counts = self.counter.count(view.prints, lambda i: item_strings(view.items[i]))
            self._counts = (view, counts)
        return counts

    def total(self, view: View) -> int:
        """Everything the model reads with this view (synchronous, as ``counts``)."""
        return request_total(self.context_tokens, self.counts(view))

    async def tokens(self, view: View) -> int:
        """Everything the model reads with this view: its items, the fixed context, reply priming."""
        last, tokens = self._tokens
        if last is not view:
            counts = await self.counter.acount(view.prints, lambda i: item_strings(view.items[i]))
            self._counts = (view, counts)
            tokens = request_total(self.context_tokens, counts)
            self._tokens = (view, tokens)
        return tokens
