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
need_jobs VNPU_KUEUE_BUILD_JOBS "$jobs"
module=sigs.k8s.io/kueue
# The version the manager logs at start and reports in its build-info metric, as Kueue's own
# Makefile sets it (no commit: a module download has no git history).
pkg=${module}/pkg/version
install_tool kueue "$module" "$version" "$jobs" config/components/crd/bases \
  "-s -w -X ${pkg}.GitVersion=${version} -X ${pkg}.GitCommit=module -X ${pkg}.BuildDate=1970-01-01" \
  "${VNPU_KUEUE_FORCE:-0}" CGO_ENABLED=0
