"""Discovery documents and the version: what kubectl and client-go read before anything else.

``routes`` answers ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>`` and
``/apis/<group>/<version>`` from here, built from ``resources.RESOURCES``. Only the legacy
(unaggregated) discovery format is served: clients that ask for the aggregated
``apidiscovery.k8s.io`` form receive plain ``application/json`` and fall back, as they do
against an older server.
"""

from __future__ import annotations

from typing import Any

from vnpu_sandbox.apiserver import resources

Json = dict[str, Any]

KUBERNETES_MINOR = 30
GIT_VERSION = f"v1.{KUBERNETES_MINOR}.0-vnpu-sandbox"
_CREATE_ONLY = {"binding": "Binding", "eviction": "Eviction"}  # subresources one only POSTs


def version() -> Json:
    return {
        "major": "1",
        "minor": str(KUBERNETES_MINOR),
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T00:00:00Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Json:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str) -> Json:
    versions = [
        {"groupVersion": f"{name}/{v}", "version": v}
        for g, v in resources.group_versions()
        if g == name
    ]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def groups() -> list[str]:
    return [g for g, _ in resources.group_versions() if g]


def api_group_list() -> Json:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in groups()]}


def api_group(name: str) -> Json | None:
    if name not in groups():
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def _entries(resource: resources.Resource) -> list[Json]:
    main: Json = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resources.ALL_VERBS),
    }
    if resource.short_names:
        main["shortNames"] = list(resource.short_names)
    if resource.categories:
        main["categories"] = list(resource.categories)
    entries = [main]
    for sub in resource.subresources:
        kind, verbs = (
            (_CREATE_ONLY[sub], ["create"])
            if sub in _CREATE_ONLY
            else (resource.kind, ["get", "patch", "update"])
        )
        entry: Json = {
            "name": f"{resource.plural}/{sub}",
            "singularName": "",
            "namespaced": resource.namespaced,
            "kind": kind,
            "verbs": verbs,
        }
        if sub == "scale":
            # The scale client (kubectl scale) reads the Scale's group and version from here.
            entry.update(group="autoscaling", version="v1", kind="Scale")
        if sub == "eviction":
            entry.update(group="policy", version="v1")  # as kube-apiserver lists it
        entries.append(entry)
    return entries


def resource_list(group: str, version: str) -> Json | None:
    served = [r for r in resources.RESOURCES if (r.group, r.version) == (group, version)]
    if not served:
        return None
    entries: list[Json] = []
    if group == "":
        entries.append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    for resource in served:
        entries.extend(_entries(resource))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": sorted(entries, key=lambda e: str(e["name"])),
    }
