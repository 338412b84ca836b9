"""Reliability drivers: crash safety, concurrency, isolation, hostile input.

Each module is a driver with a ``main()`` for the full-size run (``python -m
tests.support.reliability.<name>``) and functions the test suite calls at a smaller size. They
use the real parts only: ``memory-service serve`` processes on 127.0.0.1, real files, Qdrant
Edge. See ``benchmarks/RELIABILITY.md``.
"""
