#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane that `vnpu-sandbox up` and the tests run (the
# tests' shared kube-apiserver, the e2e sandboxes): kube-apiserver, kube-scheduler,
# kube-controller-manager and kubectl from k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3 (its etcdmain package), all
# through the Go module proxy with the machine's `go`. Nothing of theirs is committed: the
# go.mod files (and etcd's three-line main.go) are generated here, in the cache directory.
#
#   scripts/k8s-bin.sh            # or: make k8s-bin
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/k8s/<kubernetes version>/bin/, with a stamp
# naming the versions; a second run (or a fresh clone on the same machine) finds the stamp
# and builds nothing.
#
# Environment:
#   VNPU_K8S_VERSION     k8s.io/kubernetes release (default v1.37.2); the staging modules
#                        (k8s.io/api, k8s.io/apimachinery, ...) are pinned to v0.<minor>.<patch>
#   VNPU_ETCD_VERSION    go.etcd.io/etcd/server/v3 release (default v3.7.3)
#   VNPU_K8S_BUILD_JOBS  go build -p (default: the number of cores)
#   VNPU_K8S_FORCE=1     rebuild even when the stamp matches
set -euo pipefail

go_build_tool=k8s-bin
# shellcheck source=scripts/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-build.sh"

k8s_version="${VNPU_K8S_VERSION:-v1.37.2}"
etcd_version="${VNPU_ETCD_VERSION:-v3.7.3}"
jobs="${VNPU_K8S_BUILD_JOBS:-$(nproc)}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/k8s/${k8s_version}"
bin="$root/bin"
stamp="$bin/.built"
want="kubernetes=${k8s_version} etcd=${etcd_version}"
binaries=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd)

# go.mod and go.sum here are generated: let the go command complete them (GOTOOLCHAIN=local,
# set by go-build.sh, keeps a toolchain line in them from fetching another Go).
export GOFLAGS="${GOFLAGS:-} -mod=mod"

if [[ "${VNPU_K8S_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  missing=0
  for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    say "up to date in $bin ($want)"
    exit 0
  fi
fi

need_go
need_jobs VNPU_K8S_BUILD_JOBS "$jobs"
if [[ ! "$k8s_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  say "VNPU_K8S_VERSION must look like v1.37.2, not '$k8s_version'"
  exit 2
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

started=$SECONDS
log="$root/build.log"
mkdir -p "$bin" "$root/kubernetes" "$root/etcd"
: >"$log"
say "$(go version); building into $bin (log: $log)"

# --- Kubernetes -------------------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging/src paths, which only hold inside its own repository; a module that requires it
# replaces every one of them with the published release of the same minor and patch.
say "resolving k8s.io/kubernetes@${k8s_version}"
k8s_dir="$root/kubernetes"
printf 'module vnpukube\n\ngo 1.26\n' >"$k8s_dir/go.mod"
run_go "$k8s_dir" "go mod download k8s.io/kubernetes@${k8s_version}" \
  go mod download -json "k8s.io/kubernetes@${k8s_version}"
upstream_mod=$(cd "$k8s_dir" && go mod download -json "k8s.io/kubernetes@${k8s_version}" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f "$upstream_mod" ]] || { say "no go.mod for k8s.io/kubernetes@${k8s_version}"; exit 1; }
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$upstream_mod" | sort -u)
[[ ${#staging[@]} -gt 0 ]] || { say "found no staging modules in $upstream_mod"; exit 1; }
say "${#staging[@]} staging modules pinned to ${staging_version}"
{
  printf 'module vnpukube\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$k8s_version"
  for m in "${staging[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
  printf ')\n'
} >"$k8s_dir/go.mod"
rm -f "$k8s_dir/go.sum"

k8s_cmds=()
for b in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  k8s_cmds+=("k8s.io/kubernetes/cmd/$b")
done
say "downloading modules for ${k8s_cmds[*]##*/}"
run_go "$k8s_dir" "go get ${k8s_cmds[*]}" go get "${k8s_cmds[@]/%/@${k8s_version}}"

# What `kubectl version` and the components' skew checks read (hack/lib/version.sh sets the
# same variables when Kubernetes is built from its repository).
minor=${k8s_version#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=${k8s_version} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
say "compiling ${k8s_cmds[*]##*/} (go build -p $jobs; the first build takes a while)"
t=$SECONDS
run_go_long "$k8s_dir" "go build ${k8s_cmds[*]}" \
  nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$bin/" "${k8s_cmds[@]}"
say "kubernetes binaries built in $((SECONDS - t)) s"

# --- etcd -------------------------------------------------------------------------------
# go.etcd.io/etcd/server/v3 is a library; its etcdmain package is the etcd command, called
# from a main of three lines. Its own module, so its dependencies do not meet Kubernetes'.
say "resolving go.etcd.io/etcd/server/v3@${etcd_version}"
etcd_dir="$root/etcd"
printf 'module vnpuetcd\n\ngo 1.26\n' >"$etcd_dir/go.mod"
cat >"$etcd_dir/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
rm -f "$etcd_dir/go.sum"
run_go "$etcd_dir" "go get go.etcd.io/etcd/server/v3@${etcd_version}" \
  go get "go.etcd.io/etcd/server/v3/etcdmain@${etcd_version}"
run_go "$etcd_dir" "go mod tidy (etcd)" go mod tidy
t=$SECONDS
run_go_long "$etcd_dir" "go build etcd" \
  nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$bin/etcd" .
say "etcd built in $((SECONDS - t)) s"

printf '%s\n' "$want" >"$stamp"
for b in "${binaries[@]}"; do
  printf '  %-24s %s\n' "$b" "$(du -h "$bin/$b" | cut -f1)" >&2
done
say "done in $((SECONDS - started)) s: $bin"
