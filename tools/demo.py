"""Send a real 288-message Claude Code session to the `make run` proxy and show what compact_hook did.

    .venv/bin/python tools/demo.py [--api chat|anthropic|responses|google] [--model M] [--stream]

``chat`` uses the openai SDK's chat.completions (model ``demo``), ``anthropic`` the anthropic SDK's
messages.create (model ``demo-claude``: the session as Claude Code sent it), ``responses`` the openai
SDK's responses.create (model ``demo``: the session as Responses input items), ``google`` the
google-genai SDK's generate_content (model ``demo-gemini``: the session as Gemini contents).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import chat_to_google, chat_to_responses  # noqa: E402

DEMO_KEY = "sk-compact-hook-local-demo-key-5f1c2a"  # tools/run_proxy.sh's default
TRANSCRIPTS = ROOT / "tests/data/transcripts"
CHAT_TRANSCRIPT = TRANSCRIPTS / "openai/claude_code_fa812bfe_pre_compact.json"
ANTHROPIC_TRANSCRIPT = TRANSCRIPTS / "anthropic/claude_code_fa812bfe_pre_compact.json"
DEFAULT_MODELS = {"chat": "demo", "anthropic": "demo-claude", "responses": "demo", "google": "demo-gemini"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--api", choices=sorted(DEFAULT_MODELS), default="chat")
    parser.add_argument("--model")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--proxy", default="http://127.0.0.1:4000")
    parser.add_argument("--api-key", default=os.environ.get("LITELLM_MASTER_KEY", DEMO_KEY))
    parser.add_argument("--session", default="demo-session")
    args = parser.parse_args()
    model = args.model or DEFAULT_MODELS[args.api]
    send = {
        "chat": send_chat,
        "anthropic": send_anthropic,
        "responses": send_responses,
        "google": send_google,
    }[args.api]
    headers, reply = send(args, model)
    for name, value in sorted(headers.items()):
        if name.startswith("x-compact-"):
            print(f"{name}: {value}")
    print("reply:", reply)
    print(f"archive: ./compact_archive/t-*/{args.session}/ (one folder per tenant: a hash of your key)")


def send_chat(args: argparse.Namespace, model: str) -> tuple[dict[str, str], str]:
    messages = json.loads(CHAT_TRANSCRIPT.read_text(encoding="utf-8"))
    print(f"sending {len(messages)} chat messages to {model}")
    client = openai.OpenAI(base_url=f"{args.proxy}/v1", api_key=args.api_key)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, user=args.session, stream=args.stream
    )
    if args.stream:
        reply = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        reply = raw.parse().choices[0].message.content or ""
    return dict(raw.headers), reply


def send_anthropic(args: argparse.Namespace, model: str) -> tuple[dict[str, str], str]:
    messages = json.loads(ANTHROPIC_TRANSCRIPT.read_text(encoding="utf-8"))["messages"]
    print(f"sending {len(messages)} Anthropic messages to {model}")
    client = anthropic.Anthropic(base_url=args.proxy, api_key=args.api_key)
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=1024,
        system="You are Claude Code.",
        messages=messages,
        metadata={"user_id": args.session},
        stream=args.stream,
    )
    parsed: Any = raw.parse()
    if args.stream:
        reply = "".join(event.delta.text for event in parsed if event.type == "content_block_delta")
    else:
        reply = parsed.content[0].text
    return dict(raw.headers), reply


def send_responses(args: argparse.Namespace, model: str) -> tuple[dict[str, str], str]:
    items = chat_to_responses(json.loads(CHAT_TRANSCRIPT.read_text(encoding="utf-8")))
    print(f"sending {len(items)} Responses input items to {model}")
    client = openai.OpenAI(base_url=f"{args.proxy}/v1", api_key=args.api_key)
    raw = client.responses.with_raw_response.create(
        model=model,
        input=items,
        instructions="You are a coding agent.",
        user=args.session,
        stream=args.stream,
    )
    parsed: Any = raw.parse()
    if args.stream:
        reply = "".join(event.delta for event in parsed if event.type == "response.output_text.delta")
    else:
        reply = parsed.output_text
    return dict(raw.headers), reply


def send_google(args: argparse.Namespace, model: str) -> tuple[dict[str, str], str]:
    from google import genai
    from google.genai import types

    contents = chat_to_google(json.loads(CHAT_TRANSCRIPT.read_text(encoding="utf-8")))
    print(f"sending {len(contents)} Gemini contents to {model}")
    # api_version v1beta: google-genai defaults to v1, a path LiteLLM does not route
    client = genai.Client(
        api_key=args.api_key, http_options=types.HttpOptions(base_url=args.proxy, api_version="v1beta")
    )
    config = types.GenerateContentConfig(system_instruction="You are a coding agent.")
    if args.stream:
        chunks = list(client.models.generate_content_stream(model=model, contents=contents, config=config))
        http = chunks[0].sdk_http_response if chunks else None
        reply = "".join(chunk.text or "" for chunk in chunks)
    else:
        answer = client.models.generate_content(model=model, contents=contents, config=config)
        http, reply = answer.sdk_http_response, answer.text or ""
    return dict((http.headers or {}) if http is not None else {}), reply


if __name__ == "__main__":
    main()
