"""Retrieval building blocks: tokens, hashes, BM25, embeddings, fusion.

Pure functions and small classes. Nothing here knows about tenants, files or HTTP, and nothing
here imports ``memory_service``.
"""
