# vecserve HTTP service.    docker build -t vecserve .
# With Redis:               docker compose up -d   (docker-compose.yml; docs/deploy.md)
#
# BASE_IMAGE: any Debian-based image with python3 (>= 3.10), its venv module and apt; the
# same image is used for both stages, so the venv built in the first runs in the second.
# docker/debian-images.sh makes one from Debian packages for machines with no registry.
ARG BASE_IMAGE=python:3.12-slim

# -- builder: a compiler, the sdist and the wheel, and the service's venv -------------------
FROM ${BASE_IMAGE} AS builder
# gcc for the Cython kernels; Python's headers where the base lacks them (Debian's python3).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev \
       $(python3 -c 'import os, sysconfig; print("" if os.path.exists(sysconfig.get_paths()["include"] + "/Python.h") else "python3-dev")') \
    && rm -rf /var/lib/apt/lists/*
# The building machine's pip configuration, if any (see docker/build-conf/README.md).
COPY docker/build-conf/ /etc/vecserve-build/
ENV PIP_CONFIG_FILE=/etc/vecserve-build/pip.conf \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/build-tools && /opt/build-tools/bin/pip install -q build
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY vecserve ./vecserve
# python -m build makes the sdist, then the wheel from the sdist (what a PyPI user gets);
# the service's venv installs that wheel and its dependencies' wheels, nothing compiled.
RUN /opt/build-tools/bin/python -m build --outdir /dist . \
    && /opt/build-tools/bin/pip wheel -q --wheel-dir /wheels "$(ls /dist/vecserve-*.whl)[api]" \
    && python3 -m venv /opt/vecserve \
    && /opt/vecserve/bin/pip install -q --no-index --find-links /wheels "vecserve[api]"
# What the service never runs: the packages' own test suites (of gensim's, only the file
# `vecserve demo` loads and the module that finds it stay), C sources and headers, pip.
RUN site=$(/opt/vecserve/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
    && find "$site" -depth -type d -name tests -path '*/numpy/*' -exec rm -rf {} + \
    && find "$site" -depth -type d -name tests -path '*/scipy/*' -exec rm -rf {} + \
    && find "$site/gensim/test" -type f ! -name __init__.py ! -name utils.py \
         ! -name lee_fasttext.vec -delete \
    && find "$site" \( -name '*.pyx' -o -name '*.pxd' -o -name '*.c' -o -name '*.h' \) -delete \
    && /opt/vecserve/bin/python -m pip uninstall -q -y pip setuptools

# -- runtime: no compiler, no pip configuration, a non-root user -----------------------------
FROM ${BASE_IMAGE}
RUN useradd --user-group --uid 10001 --create-home --home-dir /home/vecserve vecserve \
    && install -d -o vecserve -g vecserve /var/cache/vecserve
COPY --from=builder /opt/vecserve /opt/vecserve
ENV PATH=/opt/vecserve/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VECSERVE_CACHE_DIR=/var/cache/vecserve
USER vecserve
WORKDIR /home/vecserve
EXPOSE 8000
# VECSERVE_HEALTH_URL: where the probe asks when the service listens elsewhere.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('VECSERVE_HEALTH_URL', 'http://127.0.0.1:8000/healthz'), timeout=2)"]
CMD ["vecserve", "serve", "--host", "0.0.0.0", "--port", "8000"]
