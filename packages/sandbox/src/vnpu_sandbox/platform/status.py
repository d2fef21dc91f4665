"""``vnpu-sandbox status``: is a sandbox running, which of its processes live, are nodes ready.

``vnpu_sandbox.cli`` registers this subcommand. It reads the sandbox record, checks every
recorded process (PID and start time) and asks the API for the nodes. Exit status 0 when
every process runs and every node is ready, 1 when there is no sandbox in the directory,
2 when the record cannot be read, 3 when something is down or not ready.
"""

from __future__ import annotations

import argparse
import sys

from vnpu_sandbox.platform import certificates, controlplane, layout, probes, processes, up

NAME = "status"
HELP = "Show the processes, ports and nodes of a sandbox started by `vnpu-sandbox up`."


def configure(parser: argparse.ArgumentParser) -> None:
    up.add_dir_flag(parser)


def run(args: argparse.Namespace) -> int:
    where = layout.Layout.at(args.dir)
    try:
        record = layout.read(where)
    except layout.RecordError as exc:
        print(f"vnpu-sandbox status: {exc}", file=sys.stderr)
        return 2
    if record is None:
        print(f"no sandbox in {where.root}")
        return 1
    healthy = True
    print(f"sandbox in {where.root} ({'ready' if record.ready else 'starting'})")
    print(f"  export KUBECONFIG={record.kubeconfig}")
    prometheus = f", Prometheus {record.prometheus_url}" if record.prometheus_url else ""
    print(f"  API {record.api_url}{prometheus}")
    for process in record.processes:
        running = processes.alive(process)
        healthy = healthy and running
        state = "running" if running else "exited"
        print(f"  {process.name:<28} pid {process.pid:<8} {state:<8} {process.log}")
    pki = certificates.Pki(controlplane.pki_dir(where))
    context = controlplane.tls_context(pki) if pki.ca.cert.exists() else None
    problems = probes.node_problems(record.api_url, record.nodes, context)
    for node in record.nodes:
        problem = problems.get(node.name)
        healthy = healthy and not problem
        print(f"  node {node.name:<23} {problem or 'Ready, NPUs published'}")
    return 0 if healthy else 3
