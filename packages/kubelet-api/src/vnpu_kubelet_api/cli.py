"""The ``vnpu-kubelet-api`` command: show what this package speaks.

``vnpu-kubelet-api methods`` lists every gRPC method path with its kind, read from the
compiled descriptors (so it shows exactly what a server built from these stubs exposes);
``vnpu-kubelet-api proto deviceplugin|podresources|dra|pluginregistration`` prints a shipped ``.proto`` file, for
people generating stubs in another language from the same source. Called by users only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import resources

from google.protobuf import descriptor

from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2 as deviceplugin_pb2
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra_pb2
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as pluginregistration_pb2
from vnpu_kubelet_api.podresources.v1 import api_pb2 as podresources_pb2

APIS: dict[str, tuple[str, descriptor.FileDescriptor]] = {
    "deviceplugin": ("vnpu_kubelet_api.deviceplugin.v1beta1", deviceplugin_pb2.DESCRIPTOR),
    "podresources": ("vnpu_kubelet_api.podresources.v1", podresources_pb2.DESCRIPTOR),
    "pluginregistration": (
        "vnpu_kubelet_api.pluginregistration.v1",
        pluginregistration_pb2.DESCRIPTOR,
    ),
    "dra": ("vnpu_kubelet_api.dra.v1", dra_pb2.DESCRIPTOR),
}
"""API name on the command line -> (package holding api.proto, compiled file descriptor)."""


def method_paths() -> list[tuple[str, str]]:
    """Every ``/package.Service/Method`` path of every API with its kind, in file order."""
    rows: list[tuple[str, str]] = []
    for _package, file in APIS.values():
        for service in file.services_by_name.values():
            for method in service.methods:
                kind = "server-streaming" if method.server_streaming else "unary"
                if method.client_streaming:
                    kind = "bidi-streaming" if method.server_streaming else "client-streaming"
                rows.append((f"/{service.full_name}/{method.name}", kind))
    return rows


def proto_source(api: str) -> str:
    """Text of the ``api.proto`` shipped for ``api`` (a key of ``APIS``)."""
    package, _file = APIS[api]
    return resources.files(package).joinpath("api.proto").read_text(encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vnpu-kubelet-api", description="Kubelet gRPC APIs shipped by vnpu-kubelet-api."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("methods", help="list every gRPC method path and its kind")
    proto = commands.add_parser("proto", help="print a shipped .proto file")
    proto.add_argument("api", choices=sorted(APIS), help="which API")
    args = parser.parse_args(argv)

    if args.command == "methods":
        for path, kind in method_paths():
            sys.stdout.write(f"{path}\t{kind}\n")
    else:
        sys.stdout.write(proto_source(args.api))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
