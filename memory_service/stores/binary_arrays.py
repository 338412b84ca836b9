"""Arrays sent to PostgreSQL in its binary wire form, built whole by numpy.

A record sends each new fact's dense vector and its term ids and counts: thousands of
numbers a batch. Written as text (a vector's 384 shortest float reprs) or dumped element by
element (psycopg's list adapter), they cost more than the rest of the record's Python; here
each array is one ``bytes`` made by numpy, which PostgreSQL reads without parsing. Wrap a
value (``Int8s``, ``Int4s``, ``Uuids``, ``Vector``, ``Vectors``) and pass it as any
parameter: they are registered with psycopg's adapters, which every connection starts from.

Dense vectors go in pgvector's own binary form (``Vector``, ``Vectors``): a ``real[]`` is read
one element at a time through the ``float4`` type's receive function, which for a batch's
hundred vectors of 384 floats cost the server about a millisecond; the extension's receive
reads a vector in one loop. They are sent untyped and the statement's cast names the type
(``%s::vector``), so a single vector needs no type id; an array's header names its element
type, so ``Vectors`` takes the database's id of ``vector`` (``vector_type_oid``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import psycopg
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format


class BinaryArray:
    """A one-dimensional array of one PostgreSQL type, without NULLs, in binary form."""

    __slots__ = ("cells", "data")
    ELEMENT_OID: ClassVar[int]
    ARRAY_OID: ClassVar[int]
    DTYPE: ClassVar[str]

    def __init__(self, values: np.ndarray | Sequence[object]) -> None:
        self.cells = self._cells(values)  # the elements, as numpy holds them
        self.data = _array_bytes(self.cells, self.ELEMENT_OID)

    @classmethod
    def _cells(cls, values: np.ndarray | Sequence[object]) -> np.ndarray:
        return np.asarray(values, dtype=cls.DTYPE).reshape(-1)


class Int8s(BinaryArray):
    __slots__ = ()
    ELEMENT_OID, ARRAY_OID, DTYPE = 20, 1016, ">i8"


class Int4s(BinaryArray):
    __slots__ = ()
    ELEMENT_OID, ARRAY_OID, DTYPE = 23, 1007, ">i4"


class Uuids(BinaryArray):
    """``uuid[]`` from uuid strings (or ``uuid.UUID``s, or another ``Uuids``' cells)."""

    __slots__ = ()
    ELEMENT_OID, ARRAY_OID, DTYPE = 2950, 2951, "V16"

    @classmethod
    def _cells(cls, values: np.ndarray | Sequence[object]) -> np.ndarray:
        if isinstance(values, np.ndarray) and values.dtype == np.dtype(cls.DTYPE):
            return values
        raw = b"".join(_uuid_bytes(v) for v in values)
        return np.frombuffer(raw, dtype=cls.DTYPE)


class Vector:
    """One dense vector as pgvector's ``vector``: its dimension, a reserved zero, then each
    ``float4``, big-endian (the extension's ``vector_send`` layout)."""

    __slots__ = ("data",)

    def __init__(self, values: np.ndarray | Sequence[float]) -> None:
        cells = np.asarray(values, dtype=">f4").reshape(-1)
        self.data = struct.pack(">hh", cells.size, 0) + cells.tobytes()


class Vectors:
    """The rows of a matrix as ``vector[]`` (``element_oid``: the database's type id of
    ``vector``, which an array's header must name)."""

    __slots__ = ("data",)

    def __init__(self, rows: np.ndarray | Sequence[np.ndarray], element_oid: int) -> None:
        matrix = np.asarray(rows, dtype=">f4")
        count = len(matrix)
        if count == 0:
            self.data = struct.pack(">iii", 0, 0, element_oid)
            return
        matrix = matrix.reshape(count, -1)
        dims = matrix.shape[1]
        framed = np.empty(
            count, dtype=[("size", ">i4"), ("dims", ">i2"), ("unused", ">i2"), ("v", ">f4", dims)]
        )
        framed["size"], framed["dims"], framed["unused"] = 4 + 4 * dims, dims, 0
        framed["v"] = matrix
        self.data = struct.pack(">iiiii", 1, 0, element_oid, count, 1) + framed.tobytes()


def vector_type_oid(conn: psycopg.Connection, qualified: str) -> int:
    """The type id of pgvector's ``vector`` in ``conn``'s database (``qualified``: the type's
    name with its schema, quoted as SQL writes it)."""
    row = conn.execute("SELECT to_regtype(%s)::oid::int", (qualified,)).fetchone()
    if row is None or row[0] is None:
        raise LookupError(f"no type {qualified} in this database")
    return int(row[0])


def _uuid_bytes(value: object) -> bytes:
    return value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes


def _array_bytes(cells: np.ndarray, element_oid: int) -> bytes:
    """PostgreSQL's ``array_send`` layout: dimensions, flags (no NULLs), the element type,
    the length and lower bound, then each element's byte length and big-endian bytes."""
    if cells.size == 0:
        return struct.pack(">iii", 0, 0, element_oid)
    header = struct.pack(">iiiii", 1, 0, element_oid, cells.size, 1)
    framed = np.empty(cells.size, dtype=[("size", ">i4"), ("value", cells.dtype)])
    framed["size"] = cells.dtype.itemsize
    framed["value"] = cells
    return header + framed.tobytes()


def _dumper(cls: type[BinaryArray]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = cls.ARRAY_OID

        def dump(self, obj: BinaryArray) -> bytes:
            return obj.data

    ArrayDumper.__name__ = f"{cls.__name__}Dumper"
    return ArrayDumper


class _UntypedDumper(Dumper):
    """A value whose type the statement's cast names (``oid`` 0: the server infers it)."""

    format = Format.BINARY
    oid = 0

    def dump(self, obj: Vector | Vectors) -> bytes:
        return obj.data


def register(adapters: AdaptersMap) -> None:
    """Every wrapper dumped in binary where ``adapters`` rule (a connection's, or psycopg's
    own, which connections made later start from). The arrays' types are PostgreSQL's own,
    with fixed ids: the same on every server; the vectors' are the statement's."""
    for kind in (Int8s, Int4s, Uuids):
        adapters.register_dumper(kind, _dumper(kind))
    for vector_kind in (Vector, Vectors):
        adapters.register_dumper(vector_kind, _UntypedDumper)


register(psycopg.adapters)
