"""CLI subcommands. Each module has ``register(subparsers)`` and sets ``handler``."""
