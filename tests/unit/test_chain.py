import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from compact_hook.core.chain import Entry, Owner, entry_is_usable, prefix_chain, root_position, scope_of
from compact_hook.core.counting import item_strings
from compact_hook.core.fingerprint import Fingerprint, fingerprint
from compact_hook.core.outcomes import Summarizer
from compact_hook.engine.tiers.truncation import Tier1, TruncationCache
from compact_hook.engine.view import Counted, Tiers, View
from compact_hook.settings.model import CompactConfig
from compact_hook.wires import CHAT, Conversation
from tests.fakes import WordCounter
from tests.support import Message, assistant, items_of, system, user

CONFIG = CompactConfig(context_window=1000)


def fingerprints(messages: list[Message]) -> list[Fingerprint]:
    return [fingerprint(message) for message in messages]


def scope(config: CompactConfig, model: str, tenant: str, wire: str = "chat") -> bytes:
    return scope_of(config, Owner(model, tenant, wire), "1")


def view_of(messages: list[Message], entry: Entry | None) -> View:
    conversation = Conversation(CHAT, messages)
    prints = conversation.prints()
    counts = WordCounter().count(prints, lambda i: item_strings(conversation.item(i)))
    tier1 = Tier1(TruncationCache())
    return Tiers(conversation, Counted(prints, counts, WordCounter()), CONFIG, tier1).view(entry)


def raw(view: View) -> list[Message]:
    return [item.raw for item in view.items]


def test_scope_separates_tenants_models_and_result_changing_settings() -> None:
    base = scope(CONFIG, "m", "team:a")
    assert base == scope(CONFIG, "m", "team:a")
    assert base != scope(CONFIG, "m", "team:b")
    assert base != scope(CONFIG, "other", "team:a")
    assert base != scope(CONFIG, "m", "team:a", wire="anthropic")
    assert base != scope_of(CONFIG, Owner("m", "team:a", "chat"), "2")  # the prompt version
    assert base != scope(dataclasses.replace(CONFIG, trigger_ratio=0.8), "m", "team:a")
    assert base != scope(dataclasses.replace(CONFIG, tokenizer="claude"), "m", "team:a")
    # a derived default that changes with the trigger changes the scope with it
    assert scope(CompactConfig(context_window=1000, trigger_ratio=0.5), "m", "t") != scope(
        CompactConfig(context_window=1000, trigger_ratio=0.5, clear_trigger_ratio=0.4), "m", "t"
    )
    # settings that do not change the compaction do not split the cache
    assert base == scope(dataclasses.replace(CONFIG, max_retries=5, archive_dir="/x"), "m", "team:a")
    # nor does the window: one learned from a provider's error keeps every conversation's state
    assert base == scope(dataclasses.replace(CONFIG, context_window=1234), "m", "team:a")


def test_the_chain_names_each_prefix_and_depends_on_order() -> None:
    messages = [user("a"), assistant("b"), user("c")]
    chain = prefix_chain(b"scope", fingerprints(messages))
    assert len(chain) == 4 and len(set(chain)) == 4
    longer = prefix_chain(b"scope", fingerprints(messages + [assistant("d")]))
    assert longer[:4] == chain
    swapped = prefix_chain(b"scope", fingerprints([assistant("b"), user("a"), user("c")]))
    assert swapped[2] != chain[2]
    assert prefix_chain(b"other", fingerprints(messages))[3] != chain[3]


@given(st.lists(st.binary(min_size=1, max_size=4), max_size=12), st.integers(0, 13), st.integers(0, 13))
def test_a_chain_carried_from_a_shared_start_is_the_chain_worked_out_anew(
    prints: list[bytes], shared: int, cut: int
) -> None:
    """A request hashes on from where the conversation's last request's chain stops holding: the
    chain is the same as one worked out from nothing, whatever the last one covered."""
    earlier = prefix_chain(b"scope", [*prints[:shared], b"else"] if shared < len(prints) else prints)
    carried = earlier[: min(shared, len(prints)) + 1][: cut + 1]
    assert prefix_chain(b"scope", prints, carried) == prefix_chain(b"scope", prints)
    assert prefix_chain(b"other", prints, carried) == prefix_chain(b"other", prints)


def test_root_is_the_head_plus_the_first_other_message() -> None:
    assert root_position(items_of([system("s"), system("t"), user("task"), assistant("x")])) == 3
    assert root_position(items_of([user("task"), assistant("x")])) == 1
    assert root_position(items_of([system("s")])) == 1
    assert root_position([]) == 0


def test_splice_references_the_clients_own_messages() -> None:
    messages = [system("s"), user("task"), assistant("1"), user("2"), assistant("3")]
    view = view_of(messages, Entry(covered=3, keep=(0, 1), summary="sum"))
    forwarded = raw(view)
    assert forwarded[0] is messages[0] and forwarded[1] is messages[1]
    assert view.items[2].is_summary
    assert forwarded[3:] == messages[3:] and forwarded[3] is messages[3]
    assert view.origins == [0, 1, None, 3, 4]
    assert view.spliced_prefix == 3
    assert view.prints[3:] == fingerprints(messages)[3:]


def test_splice_is_deterministic() -> None:
    messages = [user("task"), assistant("1"), user("2")]
    entry = Entry(covered=2, keep=(0,), summary="sum")
    first = view_of(messages, entry)
    second = view_of(messages, entry)
    assert raw(first) == raw(second) and first.prints == second.prints


def test_entries_round_trip_and_are_checked_before_use() -> None:
    entry = Entry(
        covered=5, keep=(0, 2), summary="ünïcode summary", cleared_before=7, summarizer=Summarizer.DIGEST
    )
    assert Entry.from_json(entry.to_json()) == entry
    assert entry.span == 7
    assert entry_is_usable(entry, 7)
    assert not entry_is_usable(entry, 6)
    assert not entry_is_usable(Entry(covered=3, keep=(3,), summary="x"), 10)
    assert not entry_is_usable(Entry(covered=0, keep=(), summary="x"), 10)
    clearing_only = Entry(cleared_before=4)
    assert Entry.from_json(clearing_only.to_json()) == clearing_only and entry_is_usable(clearing_only, 4)
    assert not entry_is_usable(Entry(covered=2, cleared_before=4), 10)
    leading = Entry(covered=5, keep=(0, 2), summary="s", summary_at=0)
    assert Entry.from_json(leading.to_json()) == leading and leading.summary_position == 0
    assert not entry_is_usable(Entry(covered=5, keep=(0,), summary="s", summary_at=2), 7)


def test_a_summary_stored_to_lead_comes_before_the_kept_messages() -> None:
    messages = [user("task"), assistant("1"), user("2"), assistant("3")]
    view = view_of(messages, Entry(covered=2, keep=(1,), summary="sum", summary_at=0))
    assert view.items[0].is_summary and raw(view)[1] is messages[1]
    assert view.origins == [None, 1, 2, 3]


def test_an_unspliced_view_has_no_prefix() -> None:
    messages = [user("a")]
    assert view_of(messages, None).spliced_prefix == 0
    assert raw(view_of(messages, None))[0] is messages[0]
