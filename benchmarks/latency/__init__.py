"""How fast the service answers: query embedding, search per engine and scope, the ways in
(HTTP, MCP), observability, trimming and erasure. Each module is run with ``python -m``."""
