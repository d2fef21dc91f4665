"""``vnpu convert``: manifests written for Volcano or HAMi, rewritten as Kubernetes' own objects.

``vnpu convert FILE`` (``-`` for stdin) reads a YAML stream and prints the converted
stream on stdout; on stderr it lists, one line each, what was not carried over, naming the
object and the field (``Job train/resnet: spec.plugins.ssh: not converted (Volcano
plugin); ...``). Per document:

* a Volcano Job or PodGroup: the Workload, PodGroup and batch/v1 Jobs of ``volcano``;
  other Volcano kinds are dropped;
* a Pod, or the pod template of a PodTemplate, Deployment, ReplicaSet, StatefulSet,
  DaemonSet, Job or CronJob: rewritten by ``podtemplates`` (NPU resource names, scheduler
  name, Volcano annotations);
* a List: its items, each its own output document;
* anything else (Services, ConfigMaps, ...): unchanged.

Names that do not say the chip model (``huawei.com/npu``) take it from ``--model``, or
from ``--cluster`` (the planner's and the sandbox's cluster file, read by
``planfiles.read_cluster``) when that names one model of the family. Exit status: 0 when
the input was read, even with parts listed as not converted; 2 when it cannot be (not
YAML, a document that is no object, a required field missing or malformed), with one line
on stderr naming the file, the document (from 1) and the field. ``vnpu_core.cli``
registers the subcommand (``add_parser``) and calls ``run``; ``convert_documents`` is pure.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from vnpu_core import catalog, errors, planfiles, podtemplates, resourcenames, volcano, yamldoc

EXIT_OK = 0
EXIT_INPUT = 2
MAX_INPUT_BYTES = 8 * 1024 * 1024  # as `vnpu plan` allows for its input files
STDIN = "-"
_VALUE_WIDTH = 80
# Where each native kind (API group, kind) keeps its pod: "" is the object itself.
_POD_AT = {
    ("", "Pod"): "",
    ("", "PodTemplate"): "template",
    ("apps", "Deployment"): "spec.template",
    ("apps", "ReplicaSet"): "spec.template",
    ("apps", "StatefulSet"): "spec.template",
    ("apps", "DaemonSet"): "spec.template",
    ("batch", "Job"): "spec.template",
    ("batch", "CronJob"): "spec.jobTemplate.spec.template",
}


@dataclass(frozen=True, slots=True)
class Converted:
    """The output documents, in input order, and what was not carried over."""

    documents: tuple[dict[str, Any], ...]
    findings: tuple[podtemplates.Finding, ...]


def convert_documents(
    documents: Sequence[yamldoc.Document], source: str, target: podtemplates.Target
) -> Converted:
    """Convert a parsed stream. Raises ``errors.InputFileError`` for a document it cannot read."""
    groups = frozenset(_volcano_groups(d.data for d in documents))
    target = dataclasses.replace(target, groups=target.groups | groups)
    out: list[dict[str, Any]] = []
    found: list[podtemplates.Finding] = []
    for index, document in enumerate(documents, start=1):
        if document.data is None:
            continue  # an empty document: a comment, or `---` twice
        where = podtemplates.Where(source, index, document.line)
        out += _convert(where, document.data, target, found)
    return Converted(tuple(out), tuple(found))


def _convert(
    where: podtemplates.Where,
    data: object,
    target: podtemplates.Target,
    found: list[podtemplates.Finding],
) -> list[dict[str, Any]]:
    if not isinstance(data, dict):
        raise where.fail("(document)", data, "must be a mapping: a Kubernetes object")
    api_version = where.text("apiVersion", data.get("apiVersion"))
    kind = where.text("kind", data.get("kind"))
    group = api_version.partition("/")[0] if "/" in api_version else ""
    if (group, kind) == ("", "List"):
        items = where.listing("items", data.get("items"))
        return [
            obj
            for i, item in enumerate(items)
            for obj in _convert(where.item(i), item, target, found)
        ]
    if volcano.is_volcano(group):
        return volcano.convert_object(where, data, group, kind, target, found)
    at = _POD_AT.get((group, kind))
    if at is None:
        return [data]
    meta = where.mapping("metadata", data.get("metadata"), required=False)
    name = meta.get("name") or meta.get("generateName") or "(unnamed)"
    namespace = meta.get("namespace") or ""
    owner = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    pod = podtemplates.rewrite(
        where, at, _get(where, data, at), owner, str(namespace), target, found
    )
    if not at:
        return [pod]
    converted = copy.deepcopy(data)
    *parents, last = at.split(".")
    holder = converted
    for part in parents:
        holder = holder[part]
    holder[last] = pod
    return [converted]


def _get(where: podtemplates.Where, data: dict[str, Any], at: str) -> object:
    """The value at the dotted field ``at`` ("" is ``data``); each parent must be a mapping."""
    value: object = data
    done: list[str] = []
    for part in at.split(".") if at else []:
        value = where.mapping(".".join(done) or "(document)", value).get(part)
        done.append(part)
    return value


def _volcano_groups(datas: Iterable[object]) -> Iterator[tuple[str, str]]:
    """(namespace, name) of every PodGroup the input's Volcano objects stand for, Lists included."""
    for data in datas:
        if not isinstance(data, dict):
            continue
        if data.get("kind") == "List" and isinstance(data.get("items"), list):
            yield from _volcano_groups(data["items"])
            continue
        group = str(data.get("apiVersion", "")).partition("/")[0]
        wanted = {(volcano.SCHEDULING_GROUP, "PodGroup"), (volcano.JOB_GROUP, "Job")}
        meta = data.get("metadata")
        if (group, data.get("kind")) in wanted and isinstance(meta, dict):
            namespace, name = meta.get("namespace") or "", meta.get("name")
            if isinstance(name, str) and isinstance(namespace, str):
                yield namespace, name


class _Dumper(yaml.SafeDumper):
    """Writes every value out: no anchors or aliases for objects that appear twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(documents: Sequence[dict[str, Any]]) -> str:
    """The documents as one YAML stream, each opened by ``---``, keys in their given order."""
    if not documents:
        return ""
    return yaml.dump_all(
        documents,
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=10_000,
    )


# --- command line -----------------------------------------------------------------------


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``convert`` with the ``vnpu`` command's subcommands."""
    parser = commands.add_parser(
        "convert",
        help="rewrite Volcano Jobs/PodGroups and HAMi or Volcano pods as Kubernetes objects for vnpu",
        description="Convert Volcano Jobs and PodGroups to batch/v1 Jobs with a scheduling.k8s.io/v1beta1 "
        "Workload and PodGroup (gang scheduling), and translate the NPU resource names and scheduler name "
        "of pods written for HAMi or Volcano. Prints the result on stdout; lists on stderr what was not "
        "converted. See docs/convert.md.",
    )
    parser.add_argument(
        "file", metavar="FILE", help="YAML manifests (several documents allowed); - reads stdin"
    )
    models = parser.add_mutually_exclusive_group()
    models.add_argument(
        "--model",
        metavar="MODEL",
        help="the chip model of names that do not say it (huawei.com/npu, huawei.com/Ascend910, ...): "
        "a catalog model (910A, 910B3, 310P3) or its common word (Ascend910A)",
    )
    models.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster file (as for vnpu plan, examples/cluster.yaml): its chip models, when one fits a name",
    )
    parser.add_argument(
        "--scheduler-name",
        default=podtemplates.DEFAULT_SCHEDULER_NAME,
        metavar="NAME",
        help="schedulerName of the converted NPU pods (default %(default)s, the Helm chart's)",
    )


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``vnpu convert`` with parsed arguments; returns the exit status."""
    source = "<stdin>" if args.file == STDIN else str(args.file)
    try:
        models = _choice(args.model, args.cluster)
        text = _read(args.file, stdin)
        try:
            documents = yamldoc.load_all(text, max_bytes=MAX_INPUT_BYTES)
        except errors.DocumentError as exc:
            raise _document_error(source, exc) from exc
        result = convert_documents(
            documents, source, podtemplates.Target(args.scheduler_name, models)
        )
    except errors.InputFileError as exc:
        where = f"{exc.path}: " if exc.path else ""
        stderr.write(f"vnpu convert: {exc.file}: {where}{exc.problem} (got {_short(exc.value)})\n")
        return EXIT_INPUT
    for finding in result.findings:
        stderr.write(f"{finding}\n")
    try:
        stdout.write(to_yaml(result.documents))
        stdout.flush()
    except BrokenPipeError:  # `vnpu convert ... | head`: the reader has gone
        return EXIT_OK
    return EXIT_OK


def _choice(model: str | None, cluster: str | None) -> resourcenames.ModelChoice:
    if model is not None:
        found = planfiles.find_model(catalog.BUILTIN, model)
        if found is None:
            known = ", ".join(m.name for m in catalog.BUILTIN)
            raise errors.InputFileError(
                "--model", "", model, f"unknown chip model; use one of {known}"
            )
        return resourcenames.ModelChoice((found,), f"--model {model}", named=True)
    if cluster is None:
        return resourcenames.ModelChoice()
    try:
        document = yamldoc.load(_read(cluster, None), max_bytes=MAX_INPUT_BYTES)
    except errors.DocumentError as exc:
        raise _document_error(cluster, exc) from exc
    nodes = planfiles.read_cluster(document, cluster, catalog.BUILTIN).nodes
    models = {chip.model.name: chip.model for node in nodes for chip in node.chips}
    return resourcenames.ModelChoice(tuple(models.values()), f"cluster file {cluster}")


def _read(path: str, stdin: TextIO | None) -> str:
    """The text of ``path`` (``-``: stdin); more than ``MAX_INPUT_BYTES`` is refused unread."""
    source = "<stdin>" if path == STDIN else path
    try:
        if path == STDIN and stdin is not None:
            text, size = stdin.read(MAX_INPUT_BYTES + 1), 0
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1)
                size = os.fstat(handle.fileno()).st_size
    except UnicodeDecodeError as exc:
        shown = exc.object[exc.start : exc.start + 1]
        raise errors.InputFileError(source, f"byte {exc.start}", shown, "is not UTF-8") from exc
    except OSError as exc:
        raise errors.InputFileError(source, "", path, f"cannot be read: {exc.strerror}") from exc
    if len(text) > MAX_INPUT_BYTES:  # characters: at least as many bytes
        raise _document_error(source, yamldoc.oversize(max(size, len(text)), MAX_INPUT_BYTES))
    return text


def _document_error(source: str, exc: errors.DocumentError) -> errors.InputFileError:
    shown = exc.value.strip() if isinstance(exc.value, str) else exc.value
    return errors.InputFileError(source, exc.where, shown, f"{exc.summary}: {exc.detail}")


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _VALUE_WIDTH else shown[: _VALUE_WIDTH - 3] + "..."
