"""memory-service: long-term and short-term memory for LLM agents."""

__version__ = "0.1.0"
