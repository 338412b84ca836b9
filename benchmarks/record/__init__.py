"""How fast the service records: backends side by side, embedders side by side, and what
making an Edge write durable costs. Each module is run with ``python -m``."""
