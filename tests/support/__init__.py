"""Helpers the tests share that are not fixtures (the fixtures are in ``tests/conftest.py``).

Not a test module: nothing here is collected. ``llm_server`` is the loopback OpenAI-compatible
model, ``chat_script`` answers it by request kind, ``server`` runs ``memory-service serve``
processes, ``api`` holds the keys and request helpers of the TestClient suites, ``backends``
the long-term backend factories, ``postgres`` the test database, and ``reliability`` the
crash, concurrency, isolation and fuzz drivers (also run at full size from the command line).
"""
