#!/usr/bin/env bash
# Fills .deps/ with the headers and static libraries qwenrt builds with, for a machine that
# has no package access (GPU clusters often have none). Run it where Debian/Ubuntu packages
# can be downloaded, then copy .deps/ along with the source tree; CMake picks it up.
#   scripts/offline-deps.sh [DEST]      (default DEST: <repo>/.deps)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$repo/.deps}
packages=(
  googletest              # GoogleTest sources (built with the tests)
  libpcre2-dev libpcre2-8-0
  libutf8proc-dev libutf8proc2
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libcpp-httplib0.11 libssl-dev libbrotli-dev libbrotli1 zlib1g-dev  # the HTTP server: its shared library, and the headers it needs
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt downloads as the unprivileged _apt user
# A private package list so this works as an ordinary user too.
mkdir -p "$work/lists/partial" "$work/archives/partial"
apt_opts=(-o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -o Debug::NoLocking=1)
if ! apt-get "${apt_opts[@]}" update -qq 2>/dev/null; then
  echo "offline-deps: private apt update failed; using the system package lists" >&2
  apt_opts=()
fi
(cd "$work" && apt-get "${apt_opts[@]}" download "${packages[@]}" >/dev/null)
mkdir -p "$dest"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest"; done
# Only static libraries are used from the prefix; drop shared objects so nothing links them.
# (cpp-httplib exists only as a shared library: it and the brotli libraries it was built with
# stay, and `qwenrt serve` needs them at run time with
# LD_LIBRARY_PATH=.deps/usr/lib/x86_64-linux-gnu, plus the host's libssl3 and zlib.)
find "$dest" -name '*.so*' ! -name 'libcpp-httplib.so*' ! -name 'libbrotli*.so*' -delete
echo "offline-deps: unpacked ${#packages[@]} packages into $dest ($(du -sh "$dest" | cut -f1))"
