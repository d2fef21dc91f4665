#!/usr/bin/env bash
# Builds the container images of vnpu's four services without a Docker daemon, and pushes
# them to a registry (docs/operator-guide.md, "Images").
#
#   scripts/images.sh build             # or: make images (which runs `make dist` first)
#   scripts/images.sh push REGISTRY     # or: make push REGISTRY=registry.example/vnpu
#
# build: one image per service (vnpu-scheduler, vnpu-device-plugin, vnpu-exporter, and
# vnpu-dra-driver, DRA mode's node agent) from deploy/images/<service>/Containerfile with
# buildah (storage driver vfs, chroot isolation),
# on a base root file system of Debian 12 (bookworm) packages made with mmdebstrap
# (--variant=minbase plus python3 and python3-venv). Each image holds a virtualenv,
# /opt/vnpu, with the service's wheels from dist/ (and those of the vnpu packages it depends
# on) and their dependencies from PyPI, at the versions of the workspace's .venv
# (deploy/images/venv.sh). Output: dist/images/<service>-<version>.tar, OCI archives, for the
# host's architecture. Needs root (buildah and mmdebstrap run here without user namespaces)
# and reaches the Debian mirror (first build only) and PyPI.
#
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/images/ holds the base root file system (a
# tarball keyed by the suite, the mirrors and the package list, made once), buildah's storage
# with the base image in it, the wheels downloaded from PyPI, and a stamp per image naming the
# inputs of its archive (an archive whose inputs did not change is not built again). Remove the
# directory to start over; a new base also picks up Debian's updates since the last one.
#
# push: copies each archive with skopeo to REGISTRY/<service>:<version> (log in first with
# `skopeo login`; REGISTRY_AUTH_FILE is honoured).
#
# Environment:
#   PIP_INDEX_URL, PIP_CERT       pip's index and CA bundle inside the build, when the host
#                                 uses a PyPI mirror or a TLS-intercepting proxy
#   VNPU_IMAGES_MIRROR            Debian mirror (default http://deb.debian.org/debian)
#   VNPU_IMAGES_SECURITY_MIRROR   Debian security mirror (default
#                                 http://deb.debian.org/debian-security)
#   VNPU_PUSH_TLS_VERIFY=false    push to a registry without TLS verification
#   VNPU_IMAGES_FORCE=1           rebuild an image whose inputs (Containerfile, wheels,
#                                 constraints, base) are those of its archive already
#   PYTHON                        the workspace's Python (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."

services=(vnpu-scheduler vnpu-device-plugin vnpu-exporter vnpu-dra-driver)
suite=bookworm
mirror="${VNPU_IMAGES_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${VNPU_IMAGES_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
base_packages=(python3 python3-venv)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/images"
out=dist/images
python="${PYTHON:-.venv/bin/python}"

say() { printf 'images: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}

# buildah on the cache's own storage: vfs needs no kernel overlay support, and a storage of its
# own never meets the driver another buildah or podman on the machine was set up with.
bah() { buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs "$@"; }

# One line per service: name, version, description, and the wheels it needs from dist/ (its
# own and those of the vnpu packages it depends on, transitively), from the pyprojects.
plan() {
  "$python" - "${services[@]}" <<'EOF'
import pathlib
import re
import sys
import tomllib

projects = {}
for path in pathlib.Path("packages").glob("*/pyproject.toml"):
    project = tomllib.loads(path.read_text())["project"]
    projects[project["name"]] = project


def name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


for service in sys.argv[1:]:
    needed, todo = set(), [service]
    while todo:
        package = todo.pop()
        if package not in needed:
            needed.add(package)
            deps = map(name, projects[package].get("dependencies", []))
            todo.extend(dep for dep in deps if dep in projects)
    wheels = [
        f"dist/{package.replace('-', '_')}-{projects[package]['version']}-py3-none-any.whl"
        for package in sorted(needed)
    ]
    project = projects[service]
    print("\t".join([service, project["version"], project["description"], " ".join(wheels)]))
EOF
}

# The base image's name, made (mmdebstrap, a minute) or imported (seconds) when missing.
base_image() {
  local include
  include=$(IFS=,; echo "${base_packages[*]}")
  local recipe=(
    mmdebstrap --variant=minbase --format=tar --include="$include"
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --aptopt='APT::Install-Recommends "false"'
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    "$suite"
  )
  local sources=(
    "deb $mirror $suite main"
    "deb $mirror $suite-updates main"
    "deb $security_mirror $suite-security main"
  )
  local key name tarball
  key=$(printf '%s\n' "${recipe[@]}" "${sources[@]}" | sha256sum | cut -c1-16)
  name="localhost/vnpu-base:$suite-$key"
  tarball="$cache/base-$suite-$key.tar"
  if bah inspect --type image "$name" >/dev/null 2>&1; then
    say "base image $name: cached"
    echo "$name"
    return
  fi
  if [[ ! -f $tarball ]]; then
    say "making the base root file system: Debian $suite, minbase + ${base_packages[*]} (log: $cache/mmdebstrap.log)"
    local t=$SECONDS
    rm -f "$cache"/base-*.tar # an earlier recipe's
    if ! "${recipe[@]}" "$tarball.part" "${sources[@]}" </dev/null >"$cache/mmdebstrap.log" 2>&1; then
      tail -n 20 "$cache/mmdebstrap.log" >&2
      rm -f "$tarball.part"
      die "mmdebstrap failed (log: $cache/mmdebstrap.log)"
    fi
    # The container runtime makes /dev; the device nodes mmdebstrap left there are not wanted.
    tar --delete --wildcards -f "$tarball.part" './dev/?*'
    mv "$tarball.part" "$tarball"
    say "base root file system made in $((SECONDS - t)) s: $(du -h "$tarball" | cut -f1)"
  fi
  local image # an earlier recipe's base images
  for image in $(bah images --format '{{.Name}}:{{.Tag}}' | grep '/vnpu-base:' || true); do
    bah rmi "$image" >/dev/null
  done
  local ctr
  ctr=$(bah from scratch)
  bah add --quiet "$ctr" "$tarball" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --label "org.opencontainers.image.base.name=debian:$suite" "$ctr"
  bah commit --quiet --rm "$ctr" "$name" >/dev/null
  say "base image $name: imported"
  echo "$name"
}

build() {
  [[ $(id -u) == 0 ]] || die "building the images needs root (buildah and mmdebstrap run here without user namespaces)"
  local tool
  for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || die "no '$tool' on PATH: apt-get install buildah mmdebstrap"
  done
  [[ -x $python ]] || die "no $python: run 'make runtime', or set PYTHON"
  local started=$SECONDS
  mkdir -p "$cache/wheels" "$cache/logs" "$out"
  local planned lines
  planned=$(plan)
  mapfile -t lines <<<"$planned"
  local line service version description wheels wheel
  for line in "${lines[@]}"; do
    IFS=$'\t' read -r service version description wheels <<<"$line"
    for wheel in $wheels; do
      [[ -f $wheel ]] || die "no $wheel: run 'make dist' (or 'make images', which does)"
    done
  done

  # Containers an interrupted build left behind.
  bah rm --all >/dev/null
  local base
  base=$(base_image)

  local constraints
  constraints=$("$python" -m pip freeze --exclude-editable --disable-pip-version-check |
    grep -E '^[A-Za-z0-9._-]+==' || true)
  local pip_conf=""
  [[ -n ${PIP_INDEX_URL:-} ]] && pip_conf+="index-url = $PIP_INDEX_URL"$'\n'
  if [[ -n ${PIP_CERT:-} ]]; then
    [[ -f $PIP_CERT ]] || die "PIP_CERT names no file: $PIP_CERT"
    pip_conf+="cert = /build/pip-ca.pem"$'\n'
  fi

  for line in "${lines[@]}"; do
    IFS=$'\t' read -r service version description wheels <<<"$line"
    local t=$SECONDS
    local ctx="$cache/context/$service"
    local log="$cache/logs/$service.log"
    local tag="localhost/$service:$version"
    rm -rf "$ctx"
    mkdir -p "$ctx"
    # shellcheck disable=SC2086  # $wheels is a list of paths without spaces
    cp $wheels deploy/images/venv.sh "$ctx/"
    printf '%s\n' "$constraints" >"$ctx/constraints.txt"
    if [[ -n $pip_conf ]]; then
      printf '[global]\n%s' "$pip_conf" >"$ctx/pip.conf"
      [[ -n ${PIP_CERT:-} ]] && cp "$PIP_CERT" "$ctx/pip-ca.pem"
    fi
    # The same inputs as the archive's last build (the wheels of `make dist` are reproducible):
    # nothing to do.
    local archive="$out/$service-$version.tar"
    local stamp="$cache/stamps/$service"
    local inputs
    inputs=$({
      (cd "$ctx" && sha256sum ./*)
      sha256sum "deploy/images/$service/Containerfile" scripts/images.sh
      printf '%s\n' "$base" "$version" "$description"
    } | sha256sum | cut -c1-64)
    if [[ ${VNPU_IMAGES_FORCE:-0} != 1 && -f $archive && -f $stamp ]] &&
      [[ "$(cat "$stamp")" == "$inputs $(sha256sum <"$archive" | cut -c1-64)" ]]; then
      say "$archive: up to date"
      continue
    fi
    say "building $tag"
    if ! bah build --quiet --isolation chroot --pull=never \
      --file "deploy/images/$service/Containerfile" --build-arg "BASE=$base" \
      --volume "$cache/wheels:/var/cache/vnpu-wheels" \
      --label "org.opencontainers.image.title=$service" \
      --label "org.opencontainers.image.version=$version" \
      --label "org.opencontainers.image.description=$description" \
      --label "org.opencontainers.image.licenses=Apache-2.0" \
      --tag "$tag" "$ctx" </dev/null >"$log" 2>&1; then
      tail -n 30 "$log" >&2
      die "building $tag failed (log: $log)"
    fi
    rm -f "$archive" "$stamp"
    bah push --quiet "$tag" "oci-archive:$archive:$service:$version" </dev/null
    # The archive is the result; vfs keeps a full copy of every layer, so the image goes.
    bah rmi "$tag" >/dev/null
    mkdir -p "$cache/stamps"
    echo "$inputs $(sha256sum <"$archive" | cut -c1-64)" >"$stamp"
    say "$archive: $(du -h "$archive" | cut -f1) in $((SECONDS - t)) s"
  done
  bah rmi --prune >/dev/null 2>&1 || true
  say "done in $((SECONDS - started)) s"
}

push() {
  local registry="${1:-}"
  registry="${registry%/}"
  [[ -n $registry ]] || die "push needs a registry: make push REGISTRY=<host>[:port]/<path>, e.g. REGISTRY=registry.example/vnpu"
  [[ $registry != *://* ]] || die "REGISTRY is a host and path, without a scheme: $registry"
  command -v skopeo >/dev/null 2>&1 || die "no 'skopeo' on PATH: apt-get install skopeo"
  local tls=()
  [[ ${VNPU_PUSH_TLS_VERIFY:-true} == false ]] && tls=(--dest-tls-verify=false)
  local planned lines line service version description wheels
  planned=$(plan)
  mapfile -t lines <<<"$planned"
  for line in "${lines[@]}"; do
    IFS=$'\t' read -r service version description wheels <<<"$line"
    [[ -f "$out/$service-$version.tar" ]] || die "no $out/$service-$version.tar: run 'make images'"
  done
  for line in "${lines[@]}"; do
    IFS=$'\t' read -r service version description wheels <<<"$line"
    say "pushing $registry/$service:$version"
    skopeo copy --quiet "${tls[@]}" "oci-archive:$out/$service-$version.tar" \
      "docker://$registry/$service:$version" </dev/null
  done
  say "pushed; install with --set global.image.registry=$registry"
}

case "${1:-}" in
  build) build ;;
  push) push "${2:-}" ;;
  *)
    say "usage: $0 build | push REGISTRY"
    exit 2
    ;;
esac
