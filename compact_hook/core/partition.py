"""Pure partitioning of a history into head / kept / middle / tail, and the order the compacted
history is assembled in: ``[*head, *kept, summary, *tail]`` (``assemble_order``).

Codex and LangChain cut by message; we cut by unit (see ``pairing``), so a tool call is
never separated from its results, whatever the budgets say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from compact_hook.core.items import Item, PartKind, Role, has_interrupt_marker, head_length
from compact_hook.core.pairing import Unit
from compact_hook.core.pinning import Pin, Shape, allot


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    """What the middle keeps verbatim besides the latest user message.

    The pinned items (``pins``, by position: the task, injected instructions, later system
    messages; see ``pinning``) within ``pinned_budget``; the users' other messages and results
    of protected tools, newest first, within ``user_message_budget`` tokens; the newest result
    of each protected tool, every interrupted-turn marker and every item the format does not
    understand, always; with ``turn_opening``, the unit that opens the turn in progress too (the
    first model message after the latest user turn: where a model that thinks once per turn put
    its thinking). Kept before the summary, it still opens the turn: the summary, a user message,
    joins the turn's tool results (Anthropic reads consecutive user messages as one).
    """

    user_message_budget: int = 0
    protected_tools: tuple[str, ...] = ()
    pins: Mapping[int, Pin] = field(default_factory=dict)
    pinned_budget: int = 0
    turn_opening: bool = False


@dataclass(frozen=True, slots=True)
class Cutting:
    """Where a partition may cut: the tail keeps whole units from the end up to ``tail_budget``
    tokens, never below ``floor`` (where the items not yet summarized begin, after a spliced-in
    summary), and the middle keeps what ``keep`` says."""

    tail_budget: int
    floor: int = 0
    keep: KeepPolicy = KeepPolicy()


@dataclass(frozen=True, slots=True)
class Partition:
    """Index ranges into the item list.

    ``items[:head_end]`` is the head, ``kept`` the middle items kept (whole units, in order:
    see ``KeepPolicy``), ``middle`` what is summarized, ``items[tail_start:]`` the tail.
    ``shapes``: kept items not shown whole (pins cut to their share, or kept as text only) —
    a text-only pin is also in ``middle``: its tool results are summarized with their turn.
    """

    head_end: int
    kept: tuple[int, ...]
    middle: tuple[int, ...]
    tail_start: int
    shapes: tuple[tuple[int, Shape], ...] = ()


def tail_start(units: Sequence[Unit], counts: Sequence[int], floor: int, budget: int) -> int:
    """Where the tail begins: whole units from the end until they reach ``budget`` tokens.

    The unit that crosses the budget is kept whole; the tail never reaches below ``floor``
    (the head, or a summary spliced in earlier).
    """
    start = len(counts)
    kept_tokens = 0
    for unit in reversed(units):
        if unit.start < floor or kept_tokens >= budget:
            break
        kept_tokens += sum(counts[unit.start : unit.end])
        start = unit.start
    return start


def latest_user_index(items: Sequence[Item]) -> int | None:
    return next((index for index in range(len(items) - 1, -1, -1) if items[index].is_user_turn), None)


def partition(
    items: Sequence[Item], counts: Sequence[int], units: Sequence[Unit], cutting: Cutting
) -> Partition:
    """Split for compaction; an empty ``middle`` means there is nothing worth summarizing.

    The tail stays above ``cutting.floor``, and unless something above it ages out there is
    nothing new to summarize — re-summarizing a summary alone would only cost a call.
    """
    floor = cutting.floor
    head_end = head_length(items)
    start = tail_start(units, counts, max(head_end, floor), cutting.tail_budget)
    inner = [unit for unit in units if head_end <= unit.start and unit.end <= start]
    kept, shapes = select_kept(items, counts, inner, cutting.keep)
    text_only = {index for index, shape in shapes if shape.text_only}
    whole = set(kept) - text_only
    middle = tuple(index for index in range(head_end, start) if index not in whole)
    if start <= floor:
        middle = ()
    return Partition(head_end=head_end, kept=kept, middle=middle, tail_start=start, shapes=shapes)


def select_kept(
    items: Sequence[Item], counts: Sequence[int], units: Sequence[Unit], keep: KeepPolicy
) -> tuple[tuple[int, ...], tuple[tuple[int, Shape], ...]]:
    """Item indices of the middle units kept, in their original order, and the shapes of
    the pins not kept whole."""
    latest_user = latest_user_index(items)
    opening = _turn_opening(items, units, latest_user) if keep.turn_opening else None
    always: list[Unit] = []
    optional: list[Unit] = []
    newest_protected: set[str] = set()
    for unit in reversed(units):
        protected = protected_tools_of(items, unit, keep.protected_tools)
        if (
            unit.start <= (latest_user if latest_user is not None else -1) < unit.end
            or unit == opening
            or any(_always_kept(items[index]) for index in range(unit.start, unit.end))
            or protected - newest_protected
        ):
            always.append(unit)
            newest_protected |= protected
        elif protected or items[unit.start].is_user_turn:
            optional.append(unit)
    taken = {index for unit in always for index in range(unit.start, unit.end)}
    shapes = _pinned(units, keep, taken)
    pinned = {index for index, shape in shapes.items() if not shape.text_only}
    optional = [unit for unit in optional if unit.start not in pinned]
    chosen = always + _within_budget(optional, counts, keep.user_message_budget - _tokens(always, counts))
    kept = {index for unit in chosen for index in range(unit.start, unit.end)} | set(shapes)
    changed = tuple((index, shape) for index, shape in sorted(shapes.items()) if shape != Shape())
    return tuple(sorted(kept)), changed


def _pinned(units: Sequence[Unit], keep: KeepPolicy, taken: set[int]) -> dict[int, Shape]:
    """The pins of these units not kept already, shaped to share ``pinned_budget``: a whole pin
    must be a unit of its own (a user turn, a system message); a text-only one is any item."""
    alone = {unit.start for unit in units if unit.end == unit.start + 1}
    inside = {index for unit in units for index in range(unit.start, unit.end)}
    pins = {
        index: pin
        for index, pin in keep.pins.items()
        if index in inside and index not in taken and (pin.text_only or index in alone)
    }
    return allot(pins, keep.pinned_budget)


def protected_tools_of(items: Sequence[Item], unit: Unit, protected: Sequence[str]) -> set[str]:
    """The protected tools a unit calls."""
    if not protected:
        return set()
    names = {
        part.name
        for index in range(unit.start, unit.end)
        for part in items[index].parts
        if part.kind is PartKind.CALL
    }
    return names & set(protected)


def _turn_opening(items: Sequence[Item], units: Sequence[Unit], latest_user: int | None) -> Unit | None:
    """The first unit after the latest user turn, when it is a model turn making calls."""
    after = latest_user if latest_user is not None else -1
    unit = next((unit for unit in units if unit.start > after), None)
    if unit is None or items[unit.start].role is not Role.ASSISTANT:
        return None
    return unit if any(items[index].has_calls for index in range(unit.start, unit.end)) else None


def _always_kept(item: Item) -> bool:
    return has_interrupt_marker(item) or item.role is Role.OTHER


def _within_budget(units: Sequence[Unit], counts: Sequence[int], budget: int) -> list[Unit]:
    """Newest first (``units`` come newest first), each whole, while the budget lasts."""
    chosen = []
    for unit in units:
        cost = _tokens([unit], counts)
        if cost > budget:
            break
        chosen.append(unit)
        budget -= cost
    return chosen


def _tokens(units: Sequence[Unit], counts: Sequence[int]) -> int:
    return sum(sum(counts[unit.start : unit.end]) for unit in units)


def assemble_order(items: Sequence[Item], part: Partition) -> list[int | None]:
    """Indices into ``items`` of the compacted list, in order; None marks the summary.

    The summary follows the kept items, so the task (the first user message, pinned) and the
    injected instructions read before it. If the first kept item after any pinned system
    messages is the model's, the summary comes just before it instead: a conversation must
    open with a user turn after its head (Anthropic requires it).
    """
    head = list(range(part.head_end))
    kept = list(part.kept)
    tail = list(range(part.tail_start, len(items)))
    lead = head_length([items[index] for index in kept])
    if lead < len(kept) and items[kept[lead]].role is not Role.USER:
        return [*head, *kept[:lead], None, *kept[lead:], *tail]
    return [*head, *kept, None, *tail]
