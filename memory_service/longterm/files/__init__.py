"""The files backend: Markdown fact files per owner are the source of truth, the index is
derived from them (``backend.FileSystemLongTermMemory``)."""
