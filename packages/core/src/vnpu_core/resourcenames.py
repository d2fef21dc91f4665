"""NPU resource names other schedulers use, and the vnpu name each one becomes.

vnpu (like HAMi, and Volcano in HAMi mode) counts chips per model: ``huawei.com/<CW>``,
with ``-memory`` (MiB) for one vNPU and ``-core`` (percent) for a soft slice, where
``<CW>`` is the model's common word (``catalog``). Manifests written for other stacks use
names that do not say the model, or say it another way:

* ``huawei.com/npu``: chips of whatever model the node has (Huawei's generic name);
* ``huawei.com/npu-core``: AI cores of one dynamic vNPU (Volcano's MindCluster mode); a
  multiple of the chip's cores is whole chips;
* ``huawei.com/Ascend910`` (every 910 generation, Huawei's plugin) and
  ``huawei.com/Ascend910B`` (older HAMi docs), each also with ``-memory`` and ``-core``;
* static vNPU kinds of Huawei's plugin such as ``huawei.com/Ascend310P-2c`` or
  ``huawei.com/Ascend910-5c.1cpu.16g``: one vNPU of the template with those cores.

``translate`` rewrites one container's ``limits`` or ``requests`` given the chip model
(``ModelChoice``: from ``--model``, or the models of a cluster file); a name it cannot
rewrite stays as it was and comes back as a problem. Names vnpu already reads
(``catalog.Catalog.by_resource``) and names outside ``huawei.com/`` pass unchanged.
Called by ``podtemplates`` for ``vnpu convert``; pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from vnpu_core import catalog, errors, quantities

PREFIX = "huawei.com/"
GENERIC_COUNT = "huawei.com/npu"
GENERIC_CORES = "huawei.com/npu-core"
# Family names: the common words they cover all start with the family.
_FAMILIES = ("Ascend910B", "Ascend910")
_NO_MODEL = "Ascend310"  # the Atlas 300I (310) chip: no vNPU, not in vnpu's catalog
_STATIC = re.compile(
    r"^huawei\.com/(?P<family>Ascend310P|Ascend910)-(?P<cores>[0-9]+)c"
    r"(?:\.(?P<cpus>[0-9]+)cpu)?(?:\.(?P<gib>[0-9]+)g)?(?:\.(?P<media>n?dvpp))?$"
)
_SUFFIXES = ("", "-memory", "-core")


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The chip models a name without a model may become, and where they came from.

    ``models`` is the one model ``--model`` names (``named``), the distinct models of a
    cluster file, or empty; ``origin`` names the source in messages (``--model 910A``,
    ``cluster file cluster.yaml``).
    """

    models: tuple[catalog.ChipModel, ...] = ()
    origin: str = ""
    named: bool = False
    known: catalog.Catalog = catalog.BUILTIN

    def pick(self, family: str) -> catalog.ChipModel | str:
        """The one model whose common word starts with ``family`` ("" for any), or why not."""
        fits = [m for m in self.models if m.common_word.startswith(family)]
        if len(fits) == 1:
            return fits[0]
        if not self.models:
            return "the chip model is not known: pass --model or --cluster"
        chip = f"{family} chip" if family else "chip"
        if not fits and self.named:
            return f"{self.origin} is not an {chip}"
        if not fits:
            return f"{self.origin} has no {chip}"
        names = ", ".join(m.name for m in fits)
        return f"{self.origin} has several {chip} models ({names}): pass --model"


@dataclass(frozen=True, slots=True)
class Renamed:
    """A container's resources after translation; ``problems`` maps each name kept as it
    was to the reason."""

    resources: dict[str, object]
    problems: dict[str, str]


def translate(resources: Mapping[str, object], choice: ModelChoice) -> Renamed:
    """Rewrite the NPU names of one ``limits`` or ``requests`` mapping, in its order."""
    results: dict[str, dict[str, object] | str | None] = {}  # None: stays as it is
    for key, value in resources.items():
        name = str(key)
        foreign = name.startswith(PREFIX) and choice.known.by_resource(name) is None
        results[name] = _one(name, value, choice) if foreign else None
    kept = {name for name, result in results.items() if not isinstance(result, dict)}
    out: dict[str, object] = {}
    problems: dict[str, str] = {}
    for name, value in resources.items():
        result = results[str(name)]
        if isinstance(result, dict):
            clash = [k for k in result if k in kept or k in out]
            if not clash:
                out.update(result)
                continue
            result = f"it would become {clash[0]}, which the container asks for already"
        if isinstance(result, str):
            problems[str(name)] = result
        out[str(name)] = value
    return Renamed(out, problems)


def _one(name: str, value: object, choice: ModelChoice) -> dict[str, object] | str:
    """The vnpu entries for one foreign name, or why it cannot be translated."""
    if name == GENERIC_COUNT:
        model = choice.pick("")
        return model if isinstance(model, str) else {model.resource_name: value}
    if name == GENERIC_CORES:
        return _cores(value, choice)
    static = _STATIC.match(name)
    if static:
        return _static(static, value, choice)
    word = name.removeprefix(PREFIX)
    for suffix in _SUFFIXES[1:]:
        if word.endswith(suffix):
            word, tail = word.removesuffix(suffix), suffix
            break
    else:
        tail = ""
    if word == _NO_MODEL:
        return "vnpu has no Ascend 310 model (Atlas 300I); only 310P and 910 chips are shared"
    if word not in _FAMILIES:
        known = ", ".join(m.common_word for m in choice.known)
        return f"unknown NPU resource; vnpu knows {GENERIC_COUNT}, {GENERIC_CORES}, the 910 family names and {known}"
    model = choice.pick(word)
    if isinstance(model, str):
        return model
    targets = {
        "": model.resource_name,
        "-memory": model.memory_resource,
        "-core": model.core_resource,
    }
    return {targets[tail]: value}


def _count(value: object) -> int | str:
    """A positive whole number from a quantity, or why it is not one."""
    try:
        parsed = quantities.parse(value)
    except errors.QuantityError as exc:
        return exc.problem
    if not parsed.whole or parsed.value < 1:
        return "must be a whole number of at least 1"
    return int(parsed.value)


def _cores(value: object, choice: ModelChoice) -> dict[str, object] | str:
    """``npu-core: N``: N/cores whole chips, or one vNPU of the smallest template with N cores."""
    model = choice.pick("")
    if isinstance(model, str):
        return model
    cores = _count(value)
    if isinstance(cores, str):
        return f"{value!r} {cores}"
    if cores % model.aicore == 0:
        return {model.resource_name: cores // model.aicore}
    fitting = [t for t in model.templates if t.aicore >= cores]
    if not fitting:
        return (
            f"{cores} AI cores is more than one {model.name} vNPU has and not a multiple of "
            f"the chip's {model.aicore}"
        )
    smallest = min(fitting, key=lambda t: (t.aicore, t.memory_mib))
    return {model.resource_name: 1, model.memory_resource: smallest.memory_mib}


def _static(found: re.Match[str], value: object, choice: ModelChoice) -> dict[str, object] | str:
    """A static vNPU kind (``Ascend910-5c.1cpu.16g: 1``): one vNPU of the matching template."""
    model = choice.pick(found["family"])
    if isinstance(model, str):
        return model
    count = _count(value)
    if isinstance(count, str):
        return f"{value!r} {count}"
    if count != 1:
        return f"{count} vNPUs in one container; vnpu (as HAMi) gives a container one vNPU at most"
    cores = int(found["cores"])
    cpus = None if found["cpus"] is None else int(found["cpus"])
    mib = None if found["gib"] is None else int(found["gib"]) * 1024
    for template in model.templates:
        if template.aicore != cores or cpus not in (None, template.aicpu):
            continue
        if mib is None or mib == template.memory_mib:
            return {model.resource_name: 1, model.memory_resource: template.memory_mib}
    names = ", ".join(t.name for t in model.templates)
    return f"{model.name} has no template of this shape (its templates: {names})"


def model_for_word(word: str, choice: ModelChoice) -> catalog.ChipModel | str | None:
    """The model a family word (``Ascend910B`` in ``hami.io/use-Ascend910B-uuid``) stands for,
    or why none; None when ``word`` is no family word (a vnpu common word stays as it is)."""
    if word not in _FAMILIES:
        return None
    return choice.pick(word)
