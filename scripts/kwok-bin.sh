#!/usr/bin/env bash
# Builds KWOK (sigs.k8s.io/kwok, the `kwok` controller that plays the kubelet of many fake
# nodes) at a pinned version through the Go module proxy with the machine's `go`, for
# benchmarks/bench_scale.py. Nothing of KWOK's is committed here: the benchmark reads KWOK's
# CRDs and its default stages from the module's own kustomize/ directory in the Go module
# cache, whose path this script records beside the binary.
#
#   scripts/kwok-bin.sh           # or: make kwok-bin
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kwok/<version>/bin/kwok, a stamp naming the
# version, and module-dir (the module's directory in `go env GOMODCACHE`); a second run finds
# the stamp and builds nothing (a module cache cleaned since is downloaded again, without a
# rebuild).
#
# Environment:
#   VNPU_KWOK_VERSION      sigs.k8s.io/kwok release (default v0.8.0)
#   VNPU_KWOK_BUILD_JOBS   go build -p (default: the number of cores)
#   VNPU_KWOK_FORCE=1      rebuild even when the stamp matches
set -euo pipefail

go_build_tool=kwok-bin
# shellcheck source=scripts/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-build.sh"

version="${VNPU_KWOK_VERSION:-v0.8.0}"
jobs="${VNPU_KWOK_BUILD_JOBS:-$(nproc)}"
need_jobs VNPU_KWOK_BUILD_JOBS "$jobs"
module=sigs.k8s.io/kwok
# The version kwok reports (`kwok --version`, the nodes' kubeletVersion) as its own release
# build sets it.
install_tool kwok "$module" "$version" "$jobs" kustomize/stage \
  "-s -w -X ${module}/pkg/consts.Version=${version}" "${VNPU_KWOK_FORCE:-0}"
