# Shared shell helpers of the scripts that build third-party Go programs from their modules
# through the Go module proxy (k8s-bin.sh, kwok-bin.sh, kueue-bin.sh). Sourced, never run:
#
#   go_build_tool=kwok-bin          # the prefix of every message
#   source "$(dirname "${BASH_SOURCE[0]}")/go-build.sh"
#
# The caller sets `log` (the build log that run_go appends to) before calling run_go. Nothing
# here writes outside the caller's cache directory.

# The machine's own Go unless the caller asks for another: a module's go or toolchain line must
# not make the go command fetch a toolchain behind our back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# A message on stderr, prefixed with the script's name.
say() { printf '%s: %s\n' "${go_build_tool:?go_build_tool is not set}" "$*" >&2; }

# Fails unless a `go` command is on PATH.
need_go() {
  command -v go >/dev/null 2>&1 || { say "no 'go' command on PATH"; exit 1; }
}

# Fails unless $2 is a positive number; $1 names the knob it came from.
need_jobs() {
  if [[ ! "$2" =~ ^[1-9][0-9]*$ ]]; then
    say "$1 must be a positive number, not '$2'"
    exit 2
  fi
}

# run_go DIR WHAT COMMAND...: runs a go command in DIR, its output appended to $log. On
# failure says WHAT failed and names what the module proxy refused, else shows the end of the
# log, and exits 1.
run_go() {
  local dir=$1 what=$2
  shift 2
  if ! (cd "$dir" && "$@") >>"${log:?log is not set}" 2>&1; then
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

# run_go_long DIR WHAT COMMAND...: run_go for a build of minutes, saying every 30 s that it is
# still going (a CI log that stays silent for ten minutes looks hung).
run_go_long() {
  local started=$SECONDS next=$((SECONDS + 30)) build
  run_go "$@" &
  build=$!
  while kill -0 "$build" 2>/dev/null; do
    sleep 1
    if ((SECONDS >= next)); then
      say "still compiling ($((SECONDS - started)) s; downloads and compiler output in $log)"
      next=$((next + 30))
    fi
  done
  wait "$build" || exit 1
}

# module_dir DIR MODULE@VERSION: prints the module's directory in the module cache, downloading
# it first when it is not there (run from DIR, outside any module or in one).
module_dir() {
  local dir=$1 module=$2
  run_go "$dir" "go mod download $module" go mod download -json "$module"
  (cd "$dir" && go mod download -json "$module") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

# install_tool NAME MODULE VERSION JOBS DATA LDFLAGS FORCE [ENV=VALUE...]: builds
# MODULE/cmd/NAME@VERSION with `go install` into ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/NAME/
# VERSION/bin (JOBS: go build -p), writes a stamp naming the version and records in
# module-dir the module's directory in the module cache, which must hold DATA (files a
# caller reads at run time: CRDs, stages). A second run finds the stamp and builds nothing; a
# module cache cleaned since is downloaded again without a rebuild. FORCE=1 rebuilds anyway.
# LDFLAGS are the version stamps the project's own release build sets; ENV is added to the
# build's environment (e.g. CGO_ENABLED=0).
install_tool() {
  local name=$1 module=$2 version=$3 jobs=$4 data=$5 ldflags=$6 force=$7
  shift 7
  local root="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/${name}/${version}"
  local bin="$root/bin" want="${name}=${version}"
  local stamp="$bin/.built" started=$SECONDS built=0 dir t
  log="$root/build.log"
  if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    say "the version must look like v1.2.3, not '$version'"
    exit 2
  fi
  need_go
  mkdir -p "$bin"
  if [[ "$force" != 1 && -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    built=1
  fi
  if [[ $built == 1 && -f "$root/module-dir" && -d "$(cat "$root/module-dir")/$data" ]]; then
    say "up to date in $bin ($want; $data in $(cat "$root/module-dir"))"
    return 0
  fi
  : >"$log"
  say "$(go version); log: $log"
  say "resolving ${module}@${version}"
  dir=$(module_dir "$root" "${module}@${version}")
  if [[ -z "$dir" || ! -d "$dir/$data" ]]; then
    say "${module}@${version} has no $data directory (looked in '${dir}')"
    exit 1
  fi
  printf '%s\n' "$dir" >"$root/module-dir"
  say "module source ($data): $dir"
  if [[ $built == 1 ]]; then
    say "$name itself is up to date in $bin ($want)"
    return 0
  fi
  say "compiling ${module}/cmd/${name}@${version} (go install -p $jobs; minutes the first time)"
  t=$SECONDS
  rm -f "$stamp"
  run_go_long "$root" "go install ${module}/cmd/${name}@${version}" \
    env GOBIN="$bin" "$@" nice -n 10 go install -p "$jobs" -trimpath -ldflags "$ldflags" \
    "${module}/cmd/${name}@${version}"
  say "$name built in $((SECONDS - t)) s"
  printf '%s\n' "$want" >"$stamp"
  printf '  %-8s %s\n' "$name" "$(du -h "$bin/$name" | cut -f1)" >&2
  say "done in $((SECONDS - started)) s: $bin"
}
