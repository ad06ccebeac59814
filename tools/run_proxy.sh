#!/usr/bin/env bash
# Start the stand-in upstream (127.0.0.1:4001), llama.cpp's server with SmolLM2-135M-Instruct
# (127.0.0.1:4002) and the LiteLLM proxy with compact_hook (127.0.0.1:4000).
# The stand-in serves the `demo` models, the llama.cpp server the `local` ones, without any provider
# account; both stop with the proxy.
set -euo pipefail
venv="${1:-.venv}"
cd "$(dirname "$0")/.."

"$venv/bin/python" tools/standin_upstream.py --host 127.0.0.1 --port 4001 &
standin=$!
# llama.cpp logs every request's timings: to a file, not between the proxy's lines
llama_log="${TMPDIR:-/tmp}/compact_hook-llama-server.log"
"$venv/bin/python" tools/llama_server.py --port 4002 --ctx 4096 2>"$llama_log" &
llama=$!
trap 'kill "$standin" "$llama" 2>/dev/null || true' EXIT INT TERM

export LITELLM_LOCAL_MODEL_COST_MAP=True
# the proxy keeps the bytecode it compiles: LiteLLM tries a failing import again on every request, and
# without it compiles that module each time (~4 ms a request; docs/operations.md, Deploying)
unset PYTHONDONTWRITEBYTECODE
# LiteLLM refuses to start without a master key; a local default keeps the demo one command.
export LITELLM_MASTER_KEY="${LITELLM_MASTER_KEY:-sk-compact-hook-local-demo-key-5f1c2a}"
echo "compact_hook: model \`local\` (SmolLM2-135M-Instruct) served by llama.cpp on 127.0.0.1:4002 (log: $llama_log)"
echo "compact_hook: proxy on http://127.0.0.1:4000 (API key: \$LITELLM_MASTER_KEY = $LITELLM_MASTER_KEY)"
"$venv/bin/litellm" --config litellm_config.yaml --host 127.0.0.1 --port 4000
