#!/usr/bin/env bash
# Builds the offline dependency prefix for machines without package access (a GPU
# cluster node, say): downloads the Debian packages once on a machine that has apt, and
# unpacks headers, static libraries and the GoogleTest sources into .deps/ (or $1).
# The top-level CMakeLists.txt picks up .deps/usr automatically; copy the folder along
# with the source tree.
#
# Usage: scripts/offline-deps.sh [PREFIX_DIR]     (default: <repo>/.deps)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-${repo_root}/.deps}"

packages=(
  googletest                          # GoogleTest + GoogleMock sources (/usr/src/googletest)
  libpcre2-dev libpcre2-8-0           # tokenizer split regex (static libpcre2-8.a)
  libutf8proc-dev libutf8proc2        # NFC normalisation (static libutf8proc.a)
  libcli11-dev                        # command line (header-only)
  nlohmann-json3-dev                  # JSON (header-only)
  libcpp-httplib-dev                  # HTTP server (header-only use)
)

command -v apt-get >/dev/null || { echo "offline-deps: needs apt-get (Debian/Ubuntu)" >&2; exit 1; }
command -v dpkg >/dev/null || { echo "offline-deps: needs dpkg" >&2; exit 1; }

download_dir="$(mktemp -d)"
trap 'rm -rf "${download_dir}"' EXIT

echo "offline-deps: downloading ${#packages[@]} packages"
# apt-get download writes into the current directory; it needs no root, but as root it
# warns that the _apt user cannot write there, which is harmless.
(cd "${download_dir}" && apt-get download "${packages[@]}")

rm -rf "${prefix}"
mkdir -p "${prefix}"
for deb in "${download_dir}"/*.deb; do
  dpkg -x "${deb}" "${prefix}"
done

# Shared objects would let a build link dynamically against libraries the target
# machine lacks; keep only the static archives the build links.
find "${prefix}/usr/lib" \( -name '*.so' -o -name '*.so.*' \) -delete
rm -rf "${prefix}/usr/share/doc" "${prefix}/usr/share/man"

test -f "${prefix}/usr/src/googletest/CMakeLists.txt" ||
  { echo "offline-deps: googletest sources missing from the package" >&2; exit 1; }
echo "offline-deps: prefix ready at ${prefix} ($(du -sh "${prefix}" | cut -f1))"
