# memory-service: the HTTP API with the bundled embedding model, fully offline at run time.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app

# torch first, from the CPU index: otherwise pip resolves a multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"

COPY pyproject.toml README.md ./
COPY indexing ./indexing
COPY memory_service ./memory_service
RUN pip install .

RUN useradd --create-home --uid 10001 memory \
    && mkdir -p /data /opt/memory-service/onnx \
    && chown memory:memory /data /opt/memory-service/onnx
USER memory

# The embedder runs on ONNX Runtime (torch only exports it): export the bundled model once at
# build time into the image, so a container start neither exports nor loads torch.
ENV MEMORY_EMBEDDING__ONNX_CACHE_DIR=/opt/memory-service/onnx
RUN python -c "from pathlib import Path; from indexing.onnx_embeddings import OnnxEmbedder; \
    OnnxEmbedder(cache_dir=Path('/opt/memory-service/onnx'))"

ENV MEMORY_WORKSPACE=/data \
    MEMORY_API__HOST=0.0.0.0 \
    MEMORY_API__PORT=8080
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=5 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"

CMD ["memory-service", "serve"]
