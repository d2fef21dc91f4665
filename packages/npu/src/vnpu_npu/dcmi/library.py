"""Finding, loading and calling ``libdcmi.so``.

The library is looked for in the path given, else in each directory of
``LD_LIBRARY_PATH``, then at the driver's usual install paths, then through the linker
cache (``ldconfig -p``). Every function of ``structs.SIGNATURES`` is looked up on its
own: a symbol an older driver lacks is recorded in ``missing`` and calling it raises
``NotSupported`` (code -99998) instead of failing the load, so ``dcmi.backend`` can fall
back to the older call. ``dcmi_init`` runs once per process and library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from vnpu_npu import errors
from vnpu_npu.dcmi import structs

LIBRARY_NAME = "libdcmi.so"
DEFAULT_PATHS = (
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
)

_init_lock = threading.Lock()
_initialised: set[str] = set()


def candidates(explicit: str | None, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The places to try, in order."""
    if explicit:
        return (explicit,)
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    paths = [os.path.join(d, LIBRARY_NAME) for d in dirs]
    return tuple(dict.fromkeys([*paths, *DEFAULT_PATHS]))


class Library:
    """A loaded libdcmi.so with typed functions; ``call`` raises translated errors."""

    def __init__(self, path: str | None = None) -> None:
        tried = list(candidates(path))
        existing = [p for p in tried if path or os.path.exists(p)]
        if not existing:
            cached = ctypes.util.find_library("dcmi")  # the linker cache, as a last resort
            if cached:
                tried.append(cached)
                existing.append(cached)
        handle, problem = None, "not found"
        for candidate in existing:
            try:
                handle = ctypes.CDLL(candidate)
            except OSError as exc:
                problem = f"cannot load {candidate}: {exc}"
                continue
            self.path = candidate
            break
        if handle is None:
            raise errors.LibraryError(tuple(tried), problem)
        self._functions: dict[str, Callable[..., int]] = {}
        for name, argtypes in structs.SIGNATURES.items():
            if not hasattr(handle, name):
                continue
            function = getattr(handle, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
            self._functions[name] = function
        self.missing = tuple(sorted(set(structs.SIGNATURES) - set(self._functions)))
        self._init_once()

    def _init_once(self) -> None:
        with _init_lock:
            if self.path in _initialised:
                return
            self.call("dcmi_init")
            _initialised.add(self.path)

    def has(self, name: str) -> bool:
        return name in self._functions

    def call(self, name: str, *args: Any, chip: int | None = None) -> None:
        """Call ``name``; a non-zero return raises ``errors.translate``'s error for it."""
        function = self._functions.get(name)
        if function is None:
            raise errors.NotSupported(
                errors.MISSING_SYMBOL, name, chip, f"{name} is not in {self.path}"
            )
        code = function(*args)
        if code != 0:
            raise errors.translate(code, name, chip)
