"""Send a real 126K-token agent conversation to the `make run` proxy and show what compact_hook did.

.venv/bin/python tools/demo.py [--model demo] [--base-url http://127.0.0.1:4000/v1]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import openai

DEMO_KEY = "sk-compact-hook-local-demo-key-5f1c2a"  # tools/run_proxy.sh's default
TRANSCRIPT = Path(__file__).parents[1] / "tests/data/transcripts/openai/claude_code_fa812bfe_pre_compact.json"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="demo")
    parser.add_argument("--base-url", default="http://127.0.0.1:4000/v1")
    parser.add_argument("--api-key", default=os.environ.get("LITELLM_MASTER_KEY", DEMO_KEY))
    parser.add_argument("--session", default="demo-session")
    args = parser.parse_args()
    messages = json.loads(TRANSCRIPT.read_text(encoding="utf-8"))
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    raw = client.chat.completions.with_raw_response.create(
        model=args.model,
        messages=messages,
        user=args.session,
    )
    print(f"sent {len(messages)} messages")
    for name, value in sorted(raw.headers.items()):
        if name.startswith("x-compact-"):
            print(f"{name}: {value}")
    print("reply:", raw.parse().choices[0].message.content)
    print(f"archive: ./compact_archive/{args.session}/")


if __name__ == "__main__":
    main()
