#!/usr/bin/env bash
# Regenerate the Python stubs of vnpu-kubelet-api from its .proto files.
#
# Run by `make proto`. The generator versions are pinned and installed into a
# private virtualenv (build/proto-venv) so the output depends only on this
# script and the .proto files, never on what else is installed. The generated
# files are committed; CI does not run this script.
#
# When the pins change, the runtime requirements in
# packages/kubelet-api/pyproject.toml must follow: grpcio >= GRPCIO_TOOLS and
# protobuf of the gencode's major version, at least the gencode's version.
set -euo pipefail
cd "$(dirname "$0")/.."

GRPCIO_TOOLS_VERSION=1.84.0
MYPY_PROTOBUF_VERSION=5.1.0
PYTHON=${PYTHON:-python3}
VENV=build/proto-venv
SRC=packages/kubelet-api/src
PROTOS=(
  vnpu_kubelet_api/deviceplugin/v1beta1/api.proto
  vnpu_kubelet_api/podresources/v1/api.proto
  vnpu_kubelet_api/dra/v1/api.proto
  vnpu_kubelet_api/pluginregistration/v1/api.proto
)

want="grpcio-tools==${GRPCIO_TOOLS_VERSION} mypy-protobuf==${MYPY_PROTOBUF_VERSION}"
stamp="$VENV/.pins"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install --quiet $want
  echo "$want" >"$stamp"
fi

for proto in "${PROTOS[@]}"; do
  dir="$SRC/$(dirname "$proto")"
  rm -f "$dir"/*_pb2.py "$dir"/*_pb2.pyi "$dir"/*_pb2_grpc.py "$dir"/*_pb2_grpc.pyi
done

"$VENV/bin/python" -m grpc_tools.protoc \
  -I "$SRC" \
  --plugin=protoc-gen-mypy="$VENV/bin/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$VENV/bin/protoc-gen-mypy_grpc" \
  --python_out="$SRC" \
  --grpc_python_out="$SRC" \
  --mypy_out="$SRC" \
  --mypy_grpc_out="$SRC" \
  "${PROTOS[@]/#/$SRC/}"

echo "generated with grpcio-tools ${GRPCIO_TOOLS_VERSION}, mypy-protobuf ${MYPY_PROTOBUF_VERSION}:"
for proto in "${PROTOS[@]}"; do
  ls "$SRC/$(dirname "$proto")" | grep -E '_pb2' | sed "s|^|  $(dirname "$proto")/|"
done
