# syntax=docker/dockerfile:1
# vecserve HTTP service. Build:  docker build -t vecserve .
# Run with Redis:                 docker compose up -d   (see docker-compose.yml)

ARG PYTHON_VERSION=3.12

# -- builder: compile the package (Cython kernels) and collect every wheel -----------------
FROM python:${PYTHON_VERSION}-slim AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# README.md is the package's readme (pyproject); .dockerignore keeps the context small.
COPY pyproject.toml setup.py README.md* ./
RUN test -f README.md || echo "vecserve" > README.md
COPY vecserve ./vecserve
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[api]"

# -- runtime: slim image, no compiler, non-root ---------------------------------------------
FROM python:${PYTHON_VERSION}-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VECSERVE_CACHE_DIR=/var/cache/vecserve
RUN useradd --system --uid 10001 --create-home --home-dir /home/vecserve vecserve \
    && mkdir -p /var/cache/vecserve \
    && chown vecserve:vecserve /var/cache/vecserve
COPY --from=builder /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "vecserve[api]" \
    && rm -rf /wheels
USER vecserve
WORKDIR /home/vecserve
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["vecserve", "serve", "--host", "0.0.0.0", "--port", "8000"]
