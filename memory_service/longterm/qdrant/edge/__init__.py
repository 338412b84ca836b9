"""Qdrant Edge: Qdrant's engine in-process, one shard in one folder that one process owns."""
