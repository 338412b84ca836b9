"""The PostgreSQL backend: facts, their dense vectors (pgvector) and their BM25 postings in
one database, every write of a user one transaction under a lock of that user's."""
