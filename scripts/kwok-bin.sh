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
module=sigs.k8s.io/kwok
root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kwok/${version}"
bin="$root/bin"
stamp="$bin/.built"
want="kwok=${version}"
log="$root/build.log"

if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  say "VNPU_KWOK_VERSION must look like v0.8.0, not '$version'"
  exit 2
fi
need_jobs VNPU_KWOK_BUILD_JOBS "$jobs"
need_go

mkdir -p "$bin"

built=0
if [[ "${VNPU_KWOK_FORCE:-0}" != 1 && -x "$bin/kwok" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  built=1
fi
if [[ $built == 1 && -f "$root/module-dir" && -d "$(cat "$root/module-dir")/kustomize/stage" ]]; then
  say "up to date in $bin ($want; stages in $(cat "$root/module-dir")/kustomize)"
  exit 0
fi

started=$SECONDS
: >"$log"
say "$(go version); log: $log"
say "resolving ${module}@${version}"
# The module's source in the module cache (downloaded if it is not there yet); the go commands
# run outside any module, in the cache directory.
dir=$(module_dir "$root" "${module}@${version}")
if [[ -z "$dir" || ! -d "$dir/kustomize/stage" ]]; then
  say "${module}@${version} has no kustomize/stage directory (looked in '${dir}')"
  exit 1
fi
printf '%s\n' "$dir" >"$root/module-dir"
say "module source (CRDs and stages): $dir"

if [[ $built == 1 ]]; then
  say "kwok itself is up to date in $bin ($want)"
  exit 0
fi

# The version kwok reports (`kwok --version`, the nodes' kubeletVersion) as its own release
# build sets it.
ldflags="-s -w -X ${module}/pkg/consts.Version=${version}"
say "compiling ${module}/cmd/kwok@${version} (go install -p $jobs; a few minutes the first time)"
t=$SECONDS
rm -f "$stamp"
run_go_long "$root" "go install ${module}/cmd/kwok@${version}" \
  env GOBIN="$bin" nice -n 10 go install -p "$jobs" -trimpath -ldflags "$ldflags" \
  "${module}/cmd/kwok@${version}"
say "kwok built in $((SECONDS - t)) s"

printf '%s\n' "$want" >"$stamp"
printf '  %-8s %s\n' kwok "$(du -h "$bin/kwok" | cut -f1)" >&2
say "done in $((SECONDS - started)) s: $bin"
