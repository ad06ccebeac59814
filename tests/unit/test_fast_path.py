"""Issue 47's shortcut, proven (issue 63): a request read with what its conversation's last request
taught equals the same request read from nothing.

The gate sets each request's entries against its conversation's last request (``state.recent``);
the wire then checks and parses only the entries that differ (``WireFormat.parse``'s ``unseen``),
and items, fingerprints and the context's prints come from what was kept wherever the entry is
the same (``Conversation.item``, ``prints``, ``context_prints``). Those rules live in docstrings
across ``state/recent.py``, each wire's ``parse`` and ``wires/conversation.py``; here they are one
property, over generated edits of the requests the real CLIs sent (``tests/data/clients``, one per
wire): entries appended, inserted, removed, edited in place, swapped; a ``/compact`` typed; the
tenant, the session or the model group switched; an earlier request sent again. Each request is read
twice — through one ``Recent`` kept across the sequence (the proxy's path), and from nothing — and
everything the engine reads of it must agree: accepted or rejected (and why), the items, each
entry's fingerprint, the context's, the client's last turn, the reserve.

On Responses, our own compaction items are among the edits (``Mementos.expand``): an item the proxy
gave out, put anywhere, kept for one tenant (another finds it gone), sent again as the same item. The
fast path looks over only the entries the last request did not send the same (``among``), and compares
the input again once it was replaced, as the gate does; from nothing, every entry is looked over.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compact_hook.proxy.answers.codex import Mementos
from compact_hook.proxy.request.caller import session_id_of
from compact_hook.state.recent import Recent
from compact_hook.state.store import MemoryStore
from compact_hook.wires import ANTHROPIC, CHAT, GOOGLE, RESPONSES, Conversation, Rejected, WireFormat
from compact_hook.wires.command import is_command

CLIENTS = Path(__file__).resolve().parents[1] / "data" / "clients"
CAPTURES = (
    (CHAT, "qwen-0.24.4-last.json"),
    (ANTHROPIC, "claude-2.1.332-last.json"),
    (RESPONSES, "codex-0.171.0-last.json"),
    (RESPONSES, "codex-0.171.0-codex-builtin-last.json"),  # with the provider's compaction items
    (GOOGLE, "gemini-0.61.0-last.json"),
)
"""A real CLI's last request of its loop on each wire, as captured."""
BODIES = {name: json.loads((CLIENTS / name).read_text()) for _, name in CAPTURES}
START = 12
"""Entries each generated conversation opens with."""
COMMANDS = {
    CHAT: {"role": "user", "content": "/compact"},
    ANTHROPIC: {"role": "user", "content": [{"type": "text", "text": "/compact"}]},
    RESPONSES: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "/compact"}]},
    GOOGLE: {"role": "user", "parts": [{"text": "/compact"}]},
}
"""A user's ``/compact`` on each wire."""
NAMES = frozenset({"type", "role", "id", "call_id", "tool_use_id", "name", "status", "signature"})
"""Fields an in-place edit leaves alone: an edit changes what was said, not the entry's shape."""

EDIT = st.one_of(
    st.tuples(st.just("grow"), st.integers(1, 6)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("remove"), st.integers(0, 10_000)),
    st.tuples(st.just("edit"), st.integers(0, 10_000), st.integers(0, 50)),
    st.tuples(st.just("swap"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("command")),
    st.tuples(st.just("switch"), st.sampled_from(["tenant", "session", "model"])),
    st.tuples(st.just("replay"), st.integers(0, 10_000)),
    st.tuples(st.just("ours"), st.integers(0, 10_000), st.integers(0, 10_000)),
)
MEMENTOS = Mementos(MemoryStore(10_000, 3600), 3600)
"""Our compaction items' contents, each kept for the tenant whose request it answered."""
MEMENTO_SIZE = 3
"""Entries an item of ours stands for (taken from the capture: they parse as the wire's)."""


class Client:
    """One client's requests on one wire: the entries it sends, to whom, as whom."""

    def __init__(self, wire: WireFormat, capture: str) -> None:
        self.wire, self.body = wire, BODIES[capture]
        self.pool: list[Any] = self.body[wire.entries_key]
        self.entries = copy.deepcopy(self.pool[:START])
        self.grown = START
        self.tenant, self.model, self.session = "team:a", "agent", ""
        self.sent: list[tuple[list[Any], str, str, str]] = []

    def apply(self, edit: tuple[Any, ...]) -> None:
        kind, *args = edit
        entries = self.entries
        if kind == "grow":
            self.entries += copy.deepcopy(self.pool[self.grown : self.grown + args[0]])
            self.grown += args[0]
        elif kind == "insert" and self.pool:
            entries.insert(args[0] % (len(entries) + 1), copy.deepcopy(self.pool[args[1] % len(self.pool)]))
        elif kind == "remove" and entries:
            del entries[args[0] % len(entries)]
        elif kind == "edit" and entries:
            edited(entries[args[0] % len(entries)], args[1])
        elif kind == "swap" and entries:
            i, j = args[0] % len(entries), args[1] % len(entries)
            entries[i], entries[j] = entries[j], entries[i]
        elif kind == "command":
            entries.append(copy.deepcopy(COMMANDS[self.wire]))
        elif kind == "switch":
            self.switch(args[0])
        elif kind == "ours" and self.wire is RESPONSES:
            entries.insert(args[0] % (len(entries) + 1), self.ours(args[1]))
        elif kind == "replay" and self.sent:
            self.entries, self.tenant, self.model, self.session = copy.deepcopy(
                self.sent[args[0] % len(self.sent)]
            )

    def ours(self, start: int) -> dict[str, Any]:
        """An item of ours, as Codex sends back what the proxy gave it: kept for this client's tenant
        (``start``: where in the capture the entries it stands for begin)."""
        start %= len(self.pool)
        memento = copy.deepcopy(self.pool[start : start + MEMENTO_SIZE])
        handle = asyncio.run(MEMENTOS.keep(memento, self.tenant))
        assert handle is not None
        return {"type": "compaction", "encrypted_content": handle}

    def switch(self, what: str) -> None:
        if what == "tenant":
            self.tenant = "team:b" if self.tenant == "team:a" else "team:a"
        elif what == "model":
            self.model = "other" if self.model == "agent" else "agent"
        else:
            self.session = "s-2" if self.session != "s-2" else "s-1"

    def request(self) -> dict[str, Any]:
        """The request as the proxy hands it to the hook: a new body, parsed from JSON."""
        self.sent.append((copy.deepcopy(self.entries), self.tenant, self.model, self.session))
        body = {**self.body, self.wire.entries_key: self.entries, "model": self.model}
        if self.session:
            body["metadata"] = {"session_id": self.session}
        return dict(json.loads(json.dumps(body)))


def edited(entry: Any, which: int) -> None:
    """Words added to one of the entry's texts (the ``which``-th, counting round): a change in place."""
    texts: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and key not in NAMES:
                    texts.append((node, key))
                else:
                    walk(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, str):
                    texts.append((node, index))
                else:
                    walk(value)

    walk(entry)
    if texts:
        holder, key = texts[which % len(texts)]
        holder[key] += " (edited)"


def read(wire: WireFormat, data: dict[str, Any], tenant: str, recent: Recent | None) -> Any:
    """What the engine reads of the request: the gate's compare → expand our items → parse → learn
    with ``recent``, or our items expanded and the wire's parse of every entry (``recent`` None)."""
    comparison = compared(wire, data, tenant, recent)
    expansion = None
    if wire is RESPONSES:
        among = comparison.unseen if comparison is not None else None
        expansion = asyncio.run(MEMENTOS.expand(data, tenant, among))
        if expansion.rewrote:
            comparison = compared(wire, data, tenant, recent)
    parsed = wire.parse(data, comparison.unseen if comparison is not None else None)
    if isinstance(parsed, Rejected):
        return parsed, expansion
    assert isinstance(parsed, Conversation)
    parsed.for_tenant(tenant)
    if recent is not None and comparison is not None:
        parsed.known = recent.learn(comparison, parsed.fingerprint, is_command)
    return seen(parsed), expansion


def compared(wire: WireFormat, data: dict[str, Any], tenant: str, recent: Recent | None) -> Any:
    """The request set against its conversation's last (``Recent.compare``); None without ``recent``."""
    if recent is None:
        return None
    entries = data[wire.entries_key]
    return recent.compare((tenant, wire.name, data["model"], session_id_of(data, entries)), entries)


def seen(parsed: Conversation) -> dict[str, Any]:
    apart = parsed.client_turn_apart()
    return {
        "items": parsed.items(),
        "prints": parsed.prints(),
        "context": parsed.context_prints(),
        "tail": apart.tail,
        "kept": len(apart.entries),
        "reserve": parsed.reserve,
        "overhead": parsed.overhead,
        "entries": parsed.entries,
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capture=st.sampled_from(CAPTURES), edits=st.lists(EDIT, min_size=1, max_size=12))
def test_a_request_read_with_what_the_last_taught_equals_it_read_from_nothing(
    capture: tuple[WireFormat, str], edits: list[tuple[Any, ...]]
) -> None:
    wire = capture[0]
    client, recent = Client(*capture), Recent()
    for edit in [("grow", 0), *edits]:
        client.apply(edit)
        data = client.request()
        fast = read(wire, data, client.tenant, recent)
        whole = read(wire, client.request(), client.tenant, None)
        assert fast == whole, edit
