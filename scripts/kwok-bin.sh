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

version="${VNPU_KWOK_VERSION:-v0.8.0}"
jobs="${VNPU_KWOK_BUILD_JOBS:-$(nproc)}"
module=sigs.k8s.io/kwok
root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kwok/${version}"
bin="$root/bin"
stamp="$bin/.built"
want="kwok=${version}"
log="$root/build.log"

# The machine's own Go unless the caller asks for another: the module's go line must not
# make the go command fetch a toolchain behind our back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

say() { printf 'kwok-bin: %s\n' "$*" >&2; }

if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  say "VNPU_KWOK_VERSION must look like v0.8.0, not '$version'"
  exit 2
fi
if [[ ! "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  say "VNPU_KWOK_BUILD_JOBS must be a positive number, not '$jobs'"
  exit 2
fi
command -v go >/dev/null 2>&1 || { say "no 'go' command on PATH"; exit 1; }

mkdir -p "$bin"

# Runs a go command (outside any module: in the cache directory); on failure names what the
# module proxy refused, else shows the end of the log.
run_go() {
  local what=$1
  shift
  if ! (cd "$root" && "$@") >>"$log" 2>&1; then
    say "failed: $what"
    local refused
    refused=$(grep -E '(403|404|410|Forbidden|not found|not available|unknown revision|invalid version|refused|no matching versions|requires go)' "$log" |
      sed -e 's/^[[:space:]]*"Error": "//' -e 's/",\{0,1\}$//' -e 's/\\n\\t/ /g' | sort -u | tail -n 5 || true)
    if [[ -n "$refused" ]]; then
      say "the Go module proxy ($(go env GOPROXY)) refused:"
      printf '  %s\n' "$refused" >&2
    else
      tail -n 20 "$log" >&2
    fi
    exit 1
  fi
}

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
# The module's source in the module cache (downloaded if it is not there yet).
run_go "go mod download ${module}@${version}" go mod download -json "${module}@${version}"
dir=$(cd "$root" && go mod download -json "${module}@${version}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
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
run_go "go install ${module}/cmd/kwok@${version}" \
  env GOBIN="$bin" nice -n 10 go install -p "$jobs" -trimpath -ldflags "$ldflags" \
  "${module}/cmd/kwok@${version}" &
build=$!
next=$((t + 30))
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  if ((SECONDS >= next)); then
    say "still compiling ($((SECONDS - t)) s; downloads and compiler output in $log)"
    next=$((next + 30))
  fi
done
wait "$build" || exit 1
say "kwok built in $((SECONDS - t)) s"

printf '%s\n' "$want" >"$stamp"
printf '  %-8s %s\n' kwok "$(du -h "$bin/kwok" | cut -f1)" >&2
say "done in $((SECONDS - started)) s: $bin"
