"""What only the Google GenAI wire has: parts, pairing by name, roles that must alternate, and the
thought signatures a Gemini 3 current turn must keep (the shared scenarios run on it in test_formats)."""

from __future__ import annotations

from typing import Any

from compact_hook.core.items import PartKind, Role
from compact_hook.core.pairing import pair
from compact_hook.wires import GOOGLE, Conversation
from compact_hook.wires.command import command_in
from compact_hook.wires.google.format import joined
from compact_hook.wires.registry import format_for
from tests.compaction import config, run
from tests.conversations import Call, Said, Tools, body, w
from tests.support import google_turn_problems, pairing_problems, unsigned_before_the_current_turn

SIGNATURE = "thoughtSignature"


def _content(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def _call(name: str, signature: str | None = None, **extra: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": {"x": 1}, **extra}}
    if signature is not None:
        part[SIGNATURE] = signature
    return part


def _response(name: str, output: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": output}, **extra}}


def test_every_gemini_call_type_is_read_by_the_google_format() -> None:
    for call_type in ("agenerate_content", "agenerate_content_stream", "generate_content"):
        assert format_for(call_type) is GOOGLE


def test_every_part_kind_is_read_and_a_signature_alone_costs_nothing() -> None:
    content = _content(
        "model",
        {"text": "thinking it over", "thought": True, SIGNATURE: "s1"},
        {"text": "I will run it"},
        _call("run_shell_command", "s2"),
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}},
        {"inlineData": {"mimeType": "image/png", "data": "aGVsbG8="}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/a.pdf"}},
        {SIGNATURE: "s3"},
    )
    item = GOOGLE.item(content)
    kinds = [part.kind for part in item.parts]
    assert kinds == [
        PartKind.THINKING,
        PartKind.TEXT,
        PartKind.CALL,
        PartKind.OPAQUE,
        PartKind.OPAQUE,
        PartKind.MEDIA,
        PartKind.MEDIA,
        PartKind.THINKING,
    ]
    assert item.role is Role.ASSISTANT and item.parts[2].name == "run_shell_command"
    assert item.parts[2].text == '{"x":1}' and item.parts[-1].text == ""
    assert item.parts[6].text == "gs://bucket/a.pdf" and item.parts[5].fixed_tokens > 0


def test_a_function_response_reads_as_its_output_and_an_error_is_flagged() -> None:
    ok = GOOGLE.item(_content("user", _response("read", "file text", id="c1")))
    failed = GOOGLE.item(
        _content("user", {"functionResponse": {"name": "read", "response": {"error": "no"}}})
    )
    structured = GOOGLE.item(_content("user", {"functionResponse": {"name": "ls", "response": {"a": [1]}}}))
    assert (ok.parts[0].kind, ok.parts[0].text, ok.parts[0].call_id) == (PartKind.RESULT, "file text", "c1")
    assert failed.parts[0].error and not ok.parts[0].error
    assert structured.parts[0].text == '{"a":[1]}'


def test_the_system_instruction_in_either_spelling_the_tools_and_a_schema_are_read_not_entries() -> None:
    tools = [{"functionDeclarations": [{"name": "run_shell_command", "description": "runs"}]}]
    schema = {"type": "object"}
    for key in ("systemInstruction", "system_instruction"):
        data = {
            "contents": [_content("user", {"text": "hi"})],
            key: {"parts": [{"text": "be brief"}, {"text": "be kind"}]},
            "tools": tools,
            "generationConfig": {"maxOutputTokens": 4096, "responseSchema": schema},
        }
        parsed = GOOGLE.parse(data)
        assert isinstance(parsed, Conversation)
        assert parsed.context == ("be brief\nbe kind", tools, schema) and parsed.reserve == 4096


def test_parallel_responses_answer_their_calls_by_name_in_any_order_and_by_id_where_both_have_one() -> None:
    by_name = [
        GOOGLE.item(_content("model", _call("read", "s"), _call("grep"), _call("ls"))),
        GOOGLE.item(_content("user", _response("ls"), _response("read"), _response("grep"))),
    ]
    pairing = pair(by_name)
    assert pairing.call_of == {(1, 0): (0, 2), (1, 1): (0, 0), (1, 2): (0, 1)} and not pairing.unanswered
    by_id = [
        GOOGLE.item(_content("model", _call("read", "s", id="a"), _call("read", id="b"))),
        GOOGLE.item(_content("user", _response("read", id="b"), _response("read", id="a"))),
    ]
    assert pair(by_id).call_of == {(1, 0): (0, 1), (1, 1): (0, 0)}


async def test_an_unanswered_parallel_call_is_answered_in_its_place_among_the_responses() -> None:
    data = {
        "contents": [
            _content("user", {"text": "task"}),
            _content("model", _call("read", "s"), _call("grep"), _call("ls")),
            _content("user", _response("read"), _response("ls"), {"text": "and then?"}),
        ]
    }
    result = await run("google", data, config(normalize="always"))
    parts = result.messages[-1]["parts"]
    assert [next(iter(p.values()))["name"] if "functionResponse" in p else "text" for p in parts] == [
        "read",
        "grep",
        "ls",
        "text",
    ]
    assert "error" in parts[1]["functionResponse"]["response"] and result.normalized > 0
    assert parts[0] == data["contents"][2]["parts"][0] and parts[3] == data["contents"][2]["parts"][2]


def test_adjacent_contents_of_one_role_are_joined_and_parts_stay_the_clients_objects() -> None:
    task, reminder = _content("user", {"text": "task"}), _content("user", {"text": "remember"})
    reply = _content("model", {"text": "ok"})
    out = joined([task, reminder, reply])
    assert [c["role"] for c in out] == ["user", "model"] and out[1] is reply
    assert out[0]["parts"][0] is task["parts"][0] and out[0]["parts"][1] is reminder["parts"][0]
    assert task == {"role": "user", "parts": [{"text": "task"}]}  # the client's content is not changed


def test_a_compact_command_is_read_from_a_user_contents_first_text_part() -> None:
    assert command_in(_content("user", {"text": "/compact the parser"})) == "the parser"
    assert command_in(_content("model", {"text": "/compact"})) is None
    assert command_in(_content("user", _response("x", "/compact"))) is None


# -- the current turn keeps its thought signatures ------------------------------------------------------------


def _rendered(result_entries: list[Any], data: dict[str, Any]) -> list[dict[str, Any]]:
    sent = dict(data)
    GOOGLE.render(sent, result_entries)
    return sent["contents"]  # type: ignore[no-any-return]


async def test_a_long_current_turn_compacted_keeps_every_signature_the_provider_checks() -> None:
    steps = [
        Said("an earlier task " + w(40)),
        *[Tools((Call("read", w(60)),)) for _ in range(3)],
        Said("the task now " + w(20)),
        *[
            Tools((Call("bash", w(60)), Call("read", w(20))) if k % 3 == 0 else (Call("bash", w(60)),))
            for k in range(14)
        ],
    ]
    data = unsigned_before_the_current_turn(body("google", steps, system="you are an agent"))
    assert google_turn_problems(data["contents"]) == []
    result = await run("google", data, config(user_message_budget=200))
    forwarded = _rendered(result.messages, data)
    assert result.compacted and pairing_problems(forwarded, GOOGLE) == []
    assert google_turn_problems(forwarded) == []
    roles = [c["role"] for c in forwarded]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:], strict=False))
    client_parts = {id(part) for content in data["contents"] for part in content["parts"]}
    built = [part for c in forwarded for part in c["parts"] if id(part) not in client_parts]
    assert len(built) == 1 and built[0]["text"].startswith("[compact_hook summary]")


async def test_a_current_turn_the_client_sent_unsigned_is_forwarded_as_it_came() -> None:
    steps = [Said("task " + w(20)), *[Tools((Call("bash", w(80)),)) for _ in range(12)]]
    data = body("google", steps)
    for content in data["contents"]:
        for part in content["parts"]:
            part.pop(SIGNATURE, None)
    result = await run("google", data, config())
    signed = [part for c in _rendered(result.messages, data) for part in c["parts"] if SIGNATURE in part]
    assert result.compacted and signed == []  # we never invent a signature
