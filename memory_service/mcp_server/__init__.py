"""The MCP server: the memory tools over the Model Context Protocol (official ``mcp`` SDK).

``tools`` says what each tool takes (the API's own request models, the user only where the
key's role allows it) and returns (the API's response models); ``server`` serves them over a
``Caller``; ``http`` mounts them at ``/mcp`` on ``serve``, behind the API keys; ``stdio`` runs
them for desktop agents (``memory-service mcp``).
"""
