#!/usr/bin/env bash
# Builds the container recipes of docker/ as a user would, with podman: the ROCm image
# (Debian trixie's ROCm: the HIP build of qwenrt for gfx1100, gfx942, gfx90a and gfx1030,
# warnings as errors, its warp-width checks and what its files hold) and the CUDA image on
# Debian trixie's own CUDA toolkit. It compiles and links; nothing runs on a GPU. In the
# CUDA image it then runs the server's end-to-end tests on the CPU against trixie's
# cpp-httplib (0.18; the README's test command builds with bookworm's 0.11).
# CI runs it (.ci/run, CI=true); the README's test command does not: it needs root,
# podman and about 12 GB of images.
#
# No image registry is needed: the Debian base image is made locally with mmdebstrap and
# imported. Cached between runs on one machine: the base tarball (remade after a week) in
# QWENRT_CONTAINER_CACHE, and podman's image layers (the toolchain layers rebuild only when
# their recipe lines change) and a ccache folder for the compile steps.
#
# Usage: scripts/container-check.sh [rocm] [cuda]   (default: both; as root)
#   QWENRT_CONTAINER_CACHE   cache folder (default: ~/.cache/qwenrt-containers)
set -euo pipefail
cd "$(dirname "$0")/.."
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(rocm cuda)
start=$SECONDS
cache=${QWENRT_CONTAINER_CACHE:-$HOME/.cache/qwenrt-containers}
mkdir -p "$cache"

if [ "$(id -u)" -ne 0 ]; then
  echo "container-check: run as root (podman builds with chroot isolation here)" >&2
  exit 1
fi
if ! command -v podman >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends podman mmdebstrap >/dev/null
fi
podman --version

# The base image, made from the Debian registry (no image registry needed).
base=localhost/debian:trixie
tarball="$cache/debian-trixie-minbase.tar"
if [ ! -f "$tarball" ] || [ -n "$(find "$tarball" -mtime +7)" ]; then
  rm -rf "$tarball"
  echo "container-check: making the Debian trixie base with mmdebstrap"
  # mmdebstrap picks the output format by the name's ending: keep ".tar".
  rm -rf "$cache/new-$(basename "$tarball")"
  mmdebstrap --quiet --variant=minbase trixie "$cache/new-$(basename "$tarball")" http://deb.debian.org/debian
  mv "$cache/new-$(basename "$tarball")" "$tarball"
  podman rmi -f "$base" >/dev/null 2>&1 || true
fi
if ! podman image exists "$base"; then
  podman import --quiet "$tarball" "$base" >/dev/null
fi

# podman's chroot isolation works inside an unprivileged container or VM, where the
# default (OCI runtime) isolation may not; package lists are long, so dpkg's progress
# lines stay out of the log.
# build_image NAME BASE [PODMAN ARGUMENTS...]: docker/NAME.Containerfile as qwenrt-NAME.
build_image() {
  local name=$1 from=$2
  shift 2
  local image_start=$SECONDS
  echo "container-check: building docker/$name.Containerfile"
  podman build --isolation=chroot --cgroup-manager=cgroupfs --layers "$@" \
    --build-arg BASE="$from" -f "docker/$name.Containerfile" -t "localhost/qwenrt-$name" . 2>&1 |
    grep --line-buffered -vE '^(Selecting previously|Preparing to unpack|Unpacking|Setting up|Processing triggers|\(Reading database)'
  echo "container-check: qwenrt-$name built in $((SECONDS - image_start)) s"
}

for name in "${images[@]}"; do
  case "$name" in
    rocm | cuda) build_image "$name" "$base" ;;
    *) echo "container-check: unknown image '$name' (rocm, cuda)" >&2; exit 2 ;;
  esac
done

# The server's end-to-end tests against trixie's cpp-httplib, in the CUDA image (on the
# CPU), with the OpenAI SDK of the host's test cache: the README's test command fetches it.
# The image builds only if they pass.
if [[ " ${images[*]} " == *" cuda "* ]]; then
  sdk=$(bash scripts/fetch-openai-sdk.sh "$PWD/.cache")
  build_image server-test localhost/qwenrt-cuda -v "$sdk:/sdk:ro"
fi
# Old layers of earlier runs go; the current images and their cache stay.
podman image prune -f >/dev/null || true
echo "container-check: ${images[*]} in $((SECONDS - start)) s (compiled and linked, server tests run on the CPU, nothing on a GPU)"
