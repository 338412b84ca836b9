"""The Qdrant backend: one point per fact in one collection, through an engine adapter
(``backend.QdrantLongTermMemory``; Qdrant Edge in-process in ``edge``, a server through
qdrant-client in ``client_engine``)."""
