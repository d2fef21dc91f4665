"""vnpu-core: the pure heart of vnpu (catalog, requests, allocator, wire protocol, ledger).

Nothing here performs I/O; services import the modules they need
(``from vnpu_core import allocator``).
"""

__version__ = "0.1.0"
