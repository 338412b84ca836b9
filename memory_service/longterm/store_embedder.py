"""A long-term store knows the embedder its dense vectors came from: the rule every backend
applies when it opens, and the re-embed that moves a store to another model.

Vectors of two models are not comparable (a query embedded by one model scored against facts
embedded by another ranks noise), so a store never mixes them. Each store keeps one record
(``EmbedderRecord``: the model's name and dimension) beside its vectors, in the backend's own
way (``EmbedderRecords``). Opening a store whose record names another model than the
configured one stops with one line naming ``MEMORY_EMBEDDING__MODEL``; ``reembed`` (the
``memory-service reembed`` command) embeds every fact again with the configured model, in
batches, each batch stamped as it lands, so a re-embed that was stopped goes on from where it
stopped; the store opens again once the last fact is done. A store made before stores kept a
record (no record) is taken to be the configured model's and gets that record at its first
open: it kept opening with that model before, so that is what its vectors are.

The name is the embedder's (``Embedder.name``): a local model directory is named by its path,
and an int8-quantised model has its own name (its vectors differ), so both count as other
models.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from indexing.embeddings import INT8_SUFFIX, Embedder
from memory_service.domain.errors import ConfigurationError

EMBEDDER_SETTING = "MEMORY_EMBEDDING__MODEL"
QUANTIZE_SETTING = "MEMORY_EMBEDDING__QUANTIZE"
REEMBED_COMMAND = "memory-service reembed"
REEMBED_BATCH = 256  # texts per embedding call and per stamped write

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EmbedderId:
    """What makes two embedders' vectors comparable: the model's name and dimension."""

    model: str
    dimension: int

    @classmethod
    def of(cls, embedder: Embedder) -> EmbedderId:
        return cls(embedder.name, int(embedder.dimension))

    def __str__(self) -> str:
        return f"{self.model} ({self.dimension} dimensions)"


@dataclass(frozen=True, slots=True)
class EmbedderRecord:
    """A store's embedder; ``previous`` is set while a re-embed from it is unfinished (the
    store then holds vectors of both and opens for nothing but ``reembed``)."""

    embedder: EmbedderId
    previous: EmbedderId | None = None

    def to_json(self) -> str:
        data: dict[str, object] = {
            "model": self.embedder.model,
            "dimension": self.embedder.dimension,
        }
        if self.previous is not None:
            data["reembedding_from"] = {
                "model": self.previous.model,
                "dimension": self.previous.dimension,
            }
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> EmbedderRecord:
        """The record in ``text``; a record that cannot be read is a ``ConfigurationError``
        (guessing would risk mixing vectors)."""
        try:
            data = json.loads(text)
            embedder = EmbedderId(str(data["model"]), int(data["dimension"]))
            before = data.get("reembedding_from")
            previous = None
            if before is not None:
                previous = EmbedderId(str(before["model"]), int(before["dimension"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(
                f"{where}: its embedding-model record is unreadable ({exc}); it says which "
                f"{EMBEDDER_SETTING} made its vectors: restore it from a backup"
            ) from exc
        return cls(embedder, previous)


class EmbedderRecords(Protocol):
    """What a backend gives the rule: its store's record, and its facts' vectors by the
    embedder that made them (``stale``: those another one made, or that carry no name)."""

    description: str  # where the store is, for messages

    def read(self) -> EmbedderRecord | None: ...

    def write(self, record: EmbedderRecord) -> None:
        """Durable when it returns."""
        ...

    def stale(self, embedder: EmbedderId) -> int:
        """How many facts' vectors ``embedder`` did not make."""
        ...

    def reembed(self, embedder: Embedder, limit: int) -> int:
        """Embed again (with ``embedder``) up to ``limit`` facts whose vectors it did not
        make, write each batch's vectors with its name, and return how many; 0: none left."""
        ...

    def finish(self, previous: EmbedderId | None) -> None:
        """The re-embed is complete: drop what only ``previous`` could read (derived
        vectors kept per model), if anything."""
        ...


def require_embedder(records: EmbedderRecords, embedder: Embedder) -> EmbedderRecord:
    """The store's record when its vectors are ``embedder``'s; a store without one is
    recorded as ``embedder``'s. Else a ``ConfigurationError`` of one line naming the setting,
    and nothing written."""
    current = EmbedderId.of(embedder)
    record = records.read()
    if record is None:
        record = EmbedderRecord(current)
        records.write(record)
        log.debug("%s: recorded its embedding model, %s", records.description, current)
        return record
    if record.previous is not None:
        raise ConfigurationError(
            f"{EMBEDDER_SETTING}: {records.description} is part-way through a re-embed from "
            f"{record.previous.model} to {record.embedder.model} and opens for nothing else: "
            f"run `{REEMBED_COMMAND}` with {_settings_of(record.embedder, current)} to finish it"
        )
    if record.embedder != current:
        raise ConfigurationError(
            f"{EMBEDDER_SETTING}: {records.description} holds vectors of {record.embedder}, "
            f"not of the configured {current}: configure it again "
            f"({_settings_of(record.embedder, current)}), or run `{REEMBED_COMMAND}` to embed "
            f"its facts again with {current.model}"
        )
    return record


def _settings_of(wanted: EmbedderId, current: EmbedderId) -> str:
    """The settings that configure ``wanted``: the model, and the int8 switch where either
    model is an int8 one (its name is its model's plus ``INT8_SUFFIX``)."""
    int8 = wanted.model.endswith(INT8_SUFFIX)
    model = wanted.model.removesuffix(INT8_SUFFIX)
    if not int8 and not current.model.endswith(INT8_SUFFIX):
        return f"{EMBEDDER_SETTING}={model}"
    return f"{EMBEDDER_SETTING}={model} with {QUANTIZE_SETTING}={str(int8).lower()}"


@dataclass(frozen=True, slots=True)
class Reembedded:
    """What a ``reembed`` call did: facts embedded again, facts still to do, and the model."""

    done: int
    left: int
    embedder: EmbedderId


def reembed(
    records: EmbedderRecords,
    embedder: Embedder,
    *,
    limit: int | None = None,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> Reembedded:
    """Move the store to ``embedder``: record the move first (the store opens for nothing
    else until it is done), embed its other facts again in batches (``limit``: stop after
    about that many, the rest left for the next call), then record ``embedder`` alone.
    ``on_start`` gets how many facts there are to do, ``on_batch`` each batch's count."""
    current = EmbedderId.of(embedder)
    record = records.read()
    if record is None or (record.embedder == current and record.previous is None):
        if record is None:
            records.write(EmbedderRecord(current))
        return Reembedded(0, 0, current)
    previous = record.previous if record.embedder == current else record.embedder
    if record.embedder != current or record.previous != previous:
        records.write(EmbedderRecord(current, previous))
    total = records.stale(current)
    if on_start is not None:
        on_start(total if limit is None else min(total, limit))
    done = 0
    while limit is None or done < limit:
        size = REEMBED_BATCH if limit is None else min(REEMBED_BATCH, limit - done)
        count = records.reembed(embedder, size)
        if count == 0:
            break
        done += count
        if on_batch is not None:
            on_batch(count)
    left = records.stale(current)
    if left == 0:
        records.write(EmbedderRecord(current))
        records.finish(previous)
        log.info("%s: every fact embedded with %s", records.description, current)
    return Reembedded(done, left, current)
