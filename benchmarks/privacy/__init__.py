"""Privacy: what the redaction detector finds and misses, and what it costs a message. Each
module is run with ``python -m``."""
