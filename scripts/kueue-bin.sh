#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue, cmd/kueue: the job queueing controller and its
# webhooks) at a pinned version through the Go module proxy with the machine's `go`, for
# `vnpu-sandbox up --kueue` and tests/e2e/test_kueue.py. Nothing of Kueue's is committed here:
# the sandbox applies Kueue's CRDs from the module's own config/components/crd/bases directory
# in the Go module cache, whose path this script records beside the binary.
#
#   scripts/kueue-bin.sh          # or: make kueue-bin
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kueue/<version>/bin/kueue, a stamp naming the
# version, and module-dir (the module's directory in `go env GOMODCACHE`); a second run finds
# the stamp and builds nothing (a module cache cleaned since is downloaded again, without a
# rebuild). The first build takes about 5 minutes on two cores.
#
# Environment:
#   VNPU_KUEUE_VERSION      sigs.k8s.io/kueue release (default v0.17.0)
#   VNPU_KUEUE_BUILD_JOBS   go build -p (default: the number of cores)
#   VNPU_KUEUE_FORCE=1      rebuild even when the stamp matches
set -euo pipefail

go_build_tool=kueue-bin
# shellcheck source=scripts/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-build.sh"

version="${VNPU_KUEUE_VERSION:-v0.17.0}"
jobs="${VNPU_KUEUE_BUILD_JOBS:-$(nproc)}"
module=sigs.k8s.io/kueue
root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kueue/${version}"
bin="$root/bin"
stamp="$bin/.built"
want="kueue=${version}"
log="$root/build.log"
crds=config/components/crd/bases

if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  say "VNPU_KUEUE_VERSION must look like v0.17.0, not '$version'"
  exit 2
fi
need_jobs VNPU_KUEUE_BUILD_JOBS "$jobs"
need_go

mkdir -p "$bin"

built=0
if [[ "${VNPU_KUEUE_FORCE:-0}" != 1 && -x "$bin/kueue" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  built=1
fi
if [[ $built == 1 && -f "$root/module-dir" && -d "$(cat "$root/module-dir")/$crds" ]]; then
  say "up to date in $bin ($want; CRDs in $(cat "$root/module-dir")/$crds)"
  exit 0
fi

started=$SECONDS
: >"$log"
say "$(go version); log: $log"
say "resolving ${module}@${version}"
# The module's source in the module cache (downloaded if it is not there yet); the go commands
# run outside any module, in the cache directory.
dir=$(module_dir "$root" "${module}@${version}")
if [[ -z "$dir" || ! -d "$dir/$crds" ]]; then
  say "${module}@${version} has no $crds directory (looked in '${dir}')"
  exit 1
fi
printf '%s\n' "$dir" >"$root/module-dir"
say "module source (CRDs): $dir/$crds"

if [[ $built == 1 ]]; then
  say "kueue itself is up to date in $bin ($want)"
  exit 0
fi

# The version the manager logs at start and reports in its build-info metric, as Kueue's own
# Makefile sets it (no commit: a module download has no git history).
pkg=${module}/pkg/version
ldflags="-s -w -X ${pkg}.GitVersion=${version} -X ${pkg}.GitCommit=module -X ${pkg}.BuildDate=1970-01-01"
say "compiling ${module}/cmd/kueue@${version} (go install -p $jobs; about 5 minutes on two cores the first time)"
t=$SECONDS
rm -f "$stamp"
run_go_long "$root" "go install ${module}/cmd/kueue@${version}" \
  env GOBIN="$bin" CGO_ENABLED=0 nice -n 10 go install -p "$jobs" -trimpath -ldflags "$ldflags" \
  "${module}/cmd/kueue@${version}"
say "kueue built in $((SECONDS - t)) s"

printf '%s\n' "$want" >"$stamp"
printf '  %-8s %s\n' kueue "$(du -h "$bin/kueue" | cut -f1)" >&2
say "done in $((SECONDS - started)) s: $bin"
