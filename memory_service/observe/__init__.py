"""Observability seams placed low in the layers: trace ids, a metrics sink, log formatting.

Every part may record through these without importing the API or ``prometheus_client``; the
API installs the real sink and fills the trace of each request (see ARCHITECTURE.md).
"""
