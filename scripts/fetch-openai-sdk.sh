#!/usr/bin/env bash
# Installs the official OpenAI SDK for Node (npm `openai`, pinned: 7.x needs Node 22, the
# machines have Node 20) into the cache folder for the server tests. Idempotent. Prints the
# folder that holds node_modules/openai.
# Usage: scripts/fetch-openai-sdk.sh [CACHE_DIR]   (default: <repo>/.cache)
set -euo pipefail

readonly kVersion="6.30.1"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${1:-${repo_root}/.cache}"
dest="${cache_dir}/openai-sdk-${kVersion}"

if [[ -f "${dest}/node_modules/openai/package.json" ]] &&
   grep -q "\"version\": \"${kVersion}\"" "${dest}/node_modules/openai/package.json"; then
  echo "${dest}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-openai-sdk: npm is needed to install openai@${kVersion}" >&2
  exit 1
fi
mkdir -p "${dest}"
(cd "${dest}" && npm install --silent --no-audit --no-fund --ignore-scripts --no-save "openai@${kVersion}" >/dev/null)
echo "${dest}"
