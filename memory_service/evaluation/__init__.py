"""Recall-accuracy and latency benchmarks, shipped with the package so ``memory-service bench``
runs from anywhere: datasets in one neutral shape, a runner that ingests each memory into a
fresh backend and queries it in every mode, metrics, reports and a scale run."""
