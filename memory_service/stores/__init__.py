"""Where the service keeps everything beside long-term facts: API keys, token usage, erase
tombstones, dead letters, maintenance state, MEMORY.md documents and, under ``shortterm``, the
sessions' state, logs and evicted tool results. One folder per kind, each with a protocol in its
``__init__`` and a files and a PostgreSQL implementation; ``build`` picks them from settings and
``database`` owns the PostgreSQL pool and its migrations."""
