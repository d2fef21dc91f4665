#!/bin/sh
# Runs inside an image being built (the RUN step of each Containerfile here, started by
# scripts/images.sh): installs the vnpu wheels of the build context, mounted at /build, into
# the virtualenv /opt/vnpu with their dependencies from PyPI, then leaves only what runs.
#
#   /build/vnpu_*.whl         the wheels of `make dist` this image needs (its service and the
#                             vnpu packages that one depends on), and no others
#   /build/constraints.txt    the versions `make test` ran with (the workspace's .venv)
#   /var/cache/vnpu-wheels    the host's wheel cache (bind-mounted), so a rebuild downloads
#                             nothing that it downloaded before
#   /build/pip.conf           when present: the host's PyPI mirror (index-url) or the CA
#                             bundle pip must trust (cert), kept out of the image and its history
set -eu
if [ -f /build/pip.conf ]; then export PIP_CONFIG_FILE=/build/pip.conf; fi

cache=/var/cache/vnpu-wheels
venv=/opt/vnpu

python3 -m venv "$venv"
# Binary wheels only (the image has no compiler). The vnpu packages are named by file, so pip
# takes them from here and never looks for a package of the same name on the index.
install() {
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-compile \
    --find-links "$cache" --constraint /build/constraints.txt /build/vnpu_*.whl
}
# From the cache alone when it has every wheel (the constraints pin the versions); otherwise
# download what is missing first, asking the index.
if ! install 2>/dev/null; then
  "$venv/bin/pip" download --quiet --disable-pip-version-check --only-binary=:all: \
    --dest "$cache" --constraint /build/constraints.txt /build/vnpu_*.whl
  rm -f "$cache"/vnpu_*.whl
  install
fi

# The Kubernetes client ships an asyncio copy of itself (kubernetes.aio, about 70 MB with its
# bytecode); vnpu uses the synchronous client only.
rm -rf "$venv"/lib/python3*/site-packages/kubernetes/aio
"$venv/bin/pip" uninstall --quiet --yes pip setuptools
# Bytecode now: the containers run with a read-only root file system and
# PYTHONDONTWRITEBYTECODE, so anything left uncompiled would be compiled at every start.
"$venv/bin/python" -m compileall -q -j 0 "$venv/lib"
