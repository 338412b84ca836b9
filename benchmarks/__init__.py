"""Measurements of memory-service: the recall lab (``benchmarks.lab``) and one-off scripts, each
run as ``python -m benchmarks.<package>.<module>``; figures in ``benchmarks/RESULTS.md``."""
