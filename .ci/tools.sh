#!/usr/bin/env bash
# The real clients and peers the tests and benchmarks run, installed from npm into .ci/tools
# (pinned: their wire behaviour is what the tests check), and Chromium for the dashboard test.
# Prints the exports for the test run on its last lines; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="$PWD/.ci/tools"
mkdir -p "$tools"
packages=(@anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 @google/gemini-cli@0.61.0
  @portkey-ai/gateway@1.15.2)
if [ ! -x "$tools/node_modules/.bin/claude" ] || [ ! -x "$tools/node_modules/.bin/codex" ] \
  || [ ! -x "$tools/node_modules/.bin/gemini" ] \
  || [ ! -d "$tools/node_modules/@portkey-ai/gateway" ]; then
  (cd "$tools" && [ -f package.json ] || echo '{"private": true}' > "$tools/package.json")
  npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "${packages[@]}" >&2
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
  else
    echo "tools: chromium is missing (apt-get install chromium)" >&2
  fi
fi
echo "export ROUTEFIT_CLAUDE_BIN=$tools/node_modules/.bin/claude"
echo "export ROUTEFIT_CODEX_BIN=$tools/node_modules/.bin/codex"
echo "export ROUTEFIT_GEMINI_BIN=$tools/node_modules/.bin/gemini"
echo "export ROUTEFIT_PORTKEY_DIR=$tools/node_modules/@portkey-ai/gateway"
