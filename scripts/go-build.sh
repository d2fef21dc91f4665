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
