"""The composition root: every object of the service is built here, from ``Settings`` alone.

Backends are swapped by configuration, never by code: ``serve``, every CLI command, the API and
the benchmarks call ``build_services`` (and ``build_maintenance`` / ``build_harness`` on top of
it); nothing below this package reads ``Settings`` to decide which class to build. It sits above
every part it wires (see ARCHITECTURE.md), so no part needs to import it back.

- ``stores``: the embedder, the long-term backend and short-term memory (the replica stores
  under them are chosen in ``stores.build``);
- ``container``: ``Services`` and ``build_services``, in the order the stores depend on;
- ``work``: maintenance, the scheduler and the harness over the running services;
- ``erasure``: every store that can hold a user's data, for an erase.
"""

from memory_service.services.container import Services, build_services
from memory_service.services.erasure_stores import build_erasure
from memory_service.services.stores import (
    build_embedder,
    build_expiry,
    build_longterm,
    build_shortterm,
)
from memory_service.services.work import build_harness, build_maintenance, build_scheduler

__all__ = [
    "Services",
    "build_embedder",
    "build_erasure",
    "build_expiry",
    "build_harness",
    "build_longterm",
    "build_maintenance",
    "build_scheduler",
    "build_services",
    "build_shortterm",
]
