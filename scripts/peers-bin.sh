#!/usr/bin/env bash
# Builds the two schedulers vnpu's classic mode runs under, from their pinned source, for
# `vnpu-sandbox up --scheduler volcano|hami`, tests/e2e/test_peers.py and
# benchmarks/bench_scale.py: Volcano's vc-scheduler and vc-controller-manager
# (volcano-sh/volcano) and HAMi's hami-scheduler (Project-HAMi/HAMi). Neither is served by the
# Go module proxy (their dependencies are), so each is built with `go build` from a source
# archive pinned by its sha256. Nothing of theirs is committed here: the sandbox reads the
# peers' CRDs from the unpacked source, whose path this script records beside the binaries.
#
#   scripts/peers-bin.sh [volcano] [hami]     # or: make peers-bin (both)
#
# Where the source comes from, per peer (PEER is VOLCANO or HAMI):
#   VNPU_PEERS_ARCHIVES   a directory holding <peer>-<commit>.tar.gz (default: ../shared/peers
#                         beside this checkout, where CI keeps them); the archive's sha256 must
#                         be the one pinned below
#   VNPU_<PEER>_SOURCE    a source tree of the same commit instead (e.g. a `git clone` of the
#                         upstream repository checked out at it); with a .git directory, its
#                         HEAD must be the pinned commit
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/peers/<peer>/<commit>/{bin,src}/ and a stamp
# naming the commit and where the source came from; a second run finds the stamp and builds
# nothing. Cold: about 4.5 min (Volcano) and 2 min (HAMi) on two cores.
#
# Environment:
#   VNPU_PEERS_BUILD_JOBS   go build -p (default: the number of cores)
#   VNPU_PEERS_FORCE=1      rebuild even when the stamp matches
set -euo pipefail

go_build_tool=peers-bin
# shellcheck source=scripts/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-build.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
archives="${VNPU_PEERS_ARCHIVES:-$repo/../shared/peers}"
jobs="${VNPU_PEERS_BUILD_JOBS:-$(nproc)}"
need_jobs VNPU_PEERS_BUILD_JOBS "$jobs"

# peer -> commit, archive sha256, upstream, the commands to build (package:binary ...)
declare -A commit=(
  [volcano]=ed72c7c815a9fd547a787134676f73d42e9d049c
  [hami]=4707fb02c91c545bc7343ce26dba4c32919f9a3e
)
declare -A sha256=(
  [volcano]=e54bdf75c2c1b14f15ac21bb19fe6d1fd517aa662c9eb4348e3f0e995e0fd3a7
  [hami]=4005c1141e6d33a2b71ff3af1a0d1f111cf87c5160cdc5d8d14cf767950da123
)
declare -A upstream=(
  [volcano]=https://github.com/volcano-sh/volcano
  [hami]=https://github.com/Project-HAMi/HAMi
)
declare -A commands=(
  [volcano]="./cmd/scheduler:vc-scheduler ./cmd/controller-manager:vc-controller-manager"
  [hami]="./cmd/scheduler:hami-scheduler"
)

# unpack PEER SRC: the pinned source of PEER into SRC (empty); prints where it came from.
unpack() {
  local peer=$1 src=$2 want=${commit[$1]}
  local override_var="VNPU_${peer^^}_SOURCE"
  local override="${!override_var:-}"
  if [[ -n "$override" ]]; then
    if [[ ! -f "$override/go.mod" ]]; then
      say "$override_var=$override: no go.mod there (a ${upstream[$peer]} checkout at $want?)"
      exit 2
    fi
    if [[ -d "$override/.git" ]]; then
      local head
      head=$(git -C "$override" rev-parse HEAD)
      if [[ "$head" != "$want" ]]; then
        say "$override_var=$override is at $head, not the pinned $want (git checkout $want)"
        exit 2
      fi
    fi
    cp -a "$override/." "$src/"
    printf 'source tree %s' "$override"
    return
  fi
  local archive="$archives/$peer-$want.tar.gz"
  if [[ ! -f "$archive" ]]; then
    say "no $archive: set VNPU_PEERS_ARCHIVES to the directory holding it, or $override_var"
    say "to a checkout of ${upstream[$peer]} at $want"
    exit 1
  fi
  local got
  got=$(sha256sum "$archive" | cut -d' ' -f1)
  if [[ "$got" != "${sha256[$peer]}" ]]; then
    say "$archive: sha256 $got, not the pinned ${sha256[$peer]}: refusing to build it"
    exit 1
  fi
  tar -xzf "$archive" -C "$src" --strip-components=1
  printf 'archive sha256:%s' "$got"
}

build_peer() {
  local peer=$1 want=${commit[$1]}
  local root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/peers/$peer/$want"
  local bin="$root/bin" src="$root/src" stamp="$root/bin/.built" started=$SECONDS
  local pair pkg name missing=0 origin
  for pair in ${commands[$peer]}; do [[ -x "$bin/${pair#*:}" ]] || missing=1; done
  if [[ "${VNPU_PEERS_FORCE:-0}" != 1 && $missing == 0 && -f "$stamp" && -f "$src/go.mod" ]] &&
    grep -q "^$peer=$want " "$stamp"; then
    say "$peer up to date in $bin ($(cat "$stamp"))"
    return 0
  fi
  need_go
  log="$root/build.log"
  rm -rf "$src" "$stamp"
  mkdir -p "$bin" "$src"
  : >"$log"
  origin=$(unpack "$peer" "$src")
  say "$(go version); $peer $want from $origin; log: $log"
  for pair in ${commands[$peer]}; do
    pkg=${pair%%:*} name=${pair#*:}
    say "compiling $name ($peer $pkg, go build -p $jobs; minutes the first time)"
    run_go_long "$src" "go build $peer $pkg" \
      nice -n 10 go build -p "$jobs" -trimpath -o "$bin/$name" "$pkg"
    printf '  %-22s %s\n' "$name" "$(du -h "$bin/$name" | cut -f1)" >&2
  done
  printf '%s=%s %s\n' "$peer" "$want" "$origin" >"$stamp"
  say "$peer done in $((SECONDS - started)) s: $bin"
}

peers=("$@")
[[ ${#peers[@]} -gt 0 ]] || peers=(volcano hami)
for peer in "${peers[@]}"; do
  if [[ -z "${commit[$peer]:-}" ]]; then
    say "unknown peer '$peer' (volcano or hami)"
    exit 2
  fi
done
for peer in "${peers[@]}"; do build_peer "$peer"; done
