"""Errors of the NPU access layer and the meaning of DCMI return codes.

Both backends raise these, with the same classes and codes for the same situation, so the
device plugin and the exporter handle a simulated node exactly like a real one. ``statefile``
and ``ledger`` (the node agents' state files) raise ``StateFileError``::

    NpuError                    base; ``retryable`` says whether trying again later can help
    ├── LibraryError            libdcmi.so cannot be found or loaded (``paths`` tried)
    ├── SimError                a simulated node's directory is unusable (``file``, ``field``, ``value``)
    ├── StateFileError          a state file cannot be read or written (``path``, ``problem``)
    │   ├── WrongFormat         it is not a document of the expected format (``expected``, ``found``)
    │   └── BadRecord           one record of it is unusable (``index``, ``field``)
    └── DriverError             a DCMI call returned non-zero (``code``, ``function``, ``chip``)
        ├── NotSupported        this driver or chip lacks the call (-8255, -8013, missing symbol)
        ├── ChipGone            the chip dropped off or is not ready (-8008, -8012); retryable
        ├── VnpuNotFound        no vNPU with ``vnpu_id`` on the chip
        ├── VnpuInUse           a container still holds the vNPU (-8020); retryable
        ├── InvalidVnpuRequest  unknown template, vNPU id outside the chip's range or taken
        └── TemplateRefused     the chip lacks a budget for the template (``budget``, ``asked``, ``free``)

``translate`` turns a bare return code into the right class; backends that know more (a
create refused for a budget, a destroy of an unknown id) raise the specific class.
"""

from __future__ import annotations

MISSING_SYMBOL = -99998  # not DCMI's: the symbol is absent from this libdcmi.so
MISSING_LIBRARY = -99999  # not DCMI's: libdcmi.so itself could not be loaded

CODES: dict[int, str] = {
    0: "success",
    -8001: "invalid parameter",
    -8002: "operation not permitted",
    -8003: "memory operation failed",
    -8004: "secure function failed",
    -8005: "inner error",
    -8006: "timeout",
    -8007: "invalid device id",
    -8008: "device does not exist",
    -8009: "ioctl failed",
    -8010: "send message failed",
    -8011: "receive message failed",
    -8012: "not ready",
    -8013: "not supported in container",
    -8014: "file operation failed",
    -8015: "reset failed",
    -8016: "reset aborted",
    -8017: "upgrading",
    -8020: "resource occupied",
    -8022: "partition not right",
    -8023: "config info does not exist",
    -8255: "not supported",
    MISSING_SYMBOL: "function missing from this libdcmi.so",
    MISSING_LIBRARY: "libdcmi.so not loaded",
}

INVALID_PARAMETER = -8001
DEVICE_NOT_EXIST = -8008
NOT_READY = -8012
NOT_SUPPORTED_IN_CONTAINER = -8013
RESOURCE_OCCUPIED = -8020
NOT_SUPPORTED = -8255

# Codes that say "not now" rather than "never": a later call may succeed unchanged.
RETRYABLE_CODES = frozenset({-8006, -8009, -8010, -8011, NOT_READY, -8017, RESOURCE_OCCUPIED})
_GONE_CODES = frozenset({DEVICE_NOT_EXIST, NOT_READY})
_UNSUPPORTED_CODES = frozenset({NOT_SUPPORTED, NOT_SUPPORTED_IN_CONTAINER, MISSING_SYMBOL})


def meaning(code: int) -> str:
    """DCMI's meaning of ``code``, or ``unknown code`` for one outside the documented list."""
    return CODES.get(code, "unknown code")


class NpuError(Exception):
    """Base of every error of the NPU access layer."""

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later without anything else changing."""
        return False


class LibraryError(NpuError):
    """libdcmi.so could not be found or loaded; ``paths`` are the places tried."""

    def __init__(self, paths: tuple[str, ...], problem: str) -> None:
        self.paths = paths
        self.problem = problem
        tried = ", ".join(paths) if paths else "nothing"
        super().__init__(f"libdcmi.so: {problem} (tried {tried})")


class SimError(NpuError):
    """A simulated node's files are unusable: ``field`` of ``file`` holds ``value``."""

    def __init__(self, file: str, field: str, value: object, problem: str) -> None:
        self.file = file
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{file}: {field}: {problem} (got {value!r})")


class StateFileError(NpuError):
    """The state file at ``path`` cannot be read or written: ``problem`` says why.

    Callers that keep their own hierarchy translate it at their boundary; nothing retries it.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class WrongFormat(StateFileError):
    """The file holds a document of another format (``found``: its ``format`` value, or the
    JSON type of a document that is not an object) where ``expected`` was asked for."""

    def __init__(self, path: str, expected: str, found: object, problem: str) -> None:
        self.expected = expected
        self.found = found
        super().__init__(path, problem)


class BadRecord(StateFileError):
    """Record ``index`` of the file is unusable; ``field`` names the field at fault ("" when the
    record itself is not an object). ``problem`` starts with ``records[<index>]``."""

    def __init__(self, path: str, index: int, field: str, problem: str) -> None:
        self.index = index
        self.field = field
        super().__init__(path, problem)


class DriverError(NpuError):
    """DCMI function ``function`` returned ``code`` for chip ``chip`` (a physical id, or None)."""

    def __init__(self, code: int, function: str, chip: int | None = None, detail: str = "") -> None:
        self.code = code
        self.function = function
        self.chip = chip
        self.meaning = meaning(code)
        self.detail = detail
        where = f" on chip {chip}" if chip is not None else ""
        text = f"{function}{where} failed with {code} ({self.meaning})"
        super().__init__(f"{text}: {detail}" if detail else text)

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES


class NotSupported(DriverError):
    """The driver or the chip does not offer this call; retrying cannot help."""

    @property
    def retryable(self) -> bool:
        return False


class ChipGone(DriverError):
    """The chip is not there (dropped off the bus, resetting, or an unknown physical id)."""

    @property
    def retryable(self) -> bool:
        return True


class VnpuNotFound(DriverError):
    """No vNPU with ``vnpu_id`` exists on the chip."""

    def __init__(self, code: int, function: str, chip: int, vnpu_id: int) -> None:
        self.vnpu_id = vnpu_id
        super().__init__(code, function, chip, f"no vNPU {vnpu_id} on chip {chip}")

    @property
    def retryable(self) -> bool:
        return False


class VnpuInUse(DriverError):
    """A container still uses vNPU ``vnpu_id``; it can be destroyed once the container ends."""

    def __init__(self, code: int, function: str, chip: int, vnpu_id: int) -> None:
        self.vnpu_id = vnpu_id
        super().__init__(code, function, chip, f"vNPU {vnpu_id} is in use by a container")

    @property
    def retryable(self) -> bool:
        return True


class InvalidVnpuRequest(DriverError):
    """A create names an unknown template, or a vNPU id outside the chip's range or taken."""

    def __init__(
        self, code: int, function: str, chip: int, field: str, value: object, problem: str
    ) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(code, function, chip, f"{field}={value!r}: {problem}")

    @property
    def retryable(self) -> bool:
        return False


class TemplateRefused(DriverError):
    """The chip lacks ``budget`` for ``template``: ``asked`` needed, ``free`` of ``total`` left.

    ``budget`` is a ``vnpu_core.budgets.Reason`` value (``vnpu-slots``, ``memory``,
    ``aicore``, ``aicpu``, ``media``); for media, ``engine`` names the short engine.
    """

    def __init__(
        self,
        code: int,
        function: str,
        chip: int,
        template: str,
        budget: str,
        asked: int,
        free: int,
        total: int,
        engine: str = "",
    ) -> None:
        self.template = template
        self.budget = budget
        self.asked = asked
        self.free = free
        self.total = total
        self.engine = engine
        what = f"{budget} ({engine})" if engine else budget
        detail = f"{template} needs {asked} {what}, chip has {free} of {total} free"
        super().__init__(code, function, chip, detail)

    @property
    def retryable(self) -> bool:
        return False


def translate(code: int, function: str, chip: int | None = None, detail: str = "") -> DriverError:
    """The error for a bare non-zero ``code`` from ``function``."""
    if code in _GONE_CODES:
        return ChipGone(code, function, chip, detail)
    if code in _UNSUPPORTED_CODES:
        return NotSupported(code, function, chip, detail)
    return DriverError(code, function, chip, detail)
