#!/usr/bin/env bash
# Build, from Debian packages alone, the two images that stand in for what users pull from
# a registry (for machines that reach a Debian mirror but no image registry):
#
#   $VECSERVE_DEBIAN_IMAGE  (default vecserve-debian:bookworm): python3 + venv + apt, the
#       Dockerfile's BASE_IMAGE in place of python:3.12-slim;
#   $VECSERVE_REDIS_IMAGE   (default vecserve-redis:bookworm): the base plus Debian's
#       redis-server, answering to valkey-server / valkey-cli, running as user redis in
#       /data (its entrypoint hands /data to that user, as valkey/valkey's does), in place
#       of valkey/valkey in docker-compose.yml (docker/redis.Dockerfile).
#
# Usage: docker/debian-images.sh [base|redis]...   (both by default). Needs root,
# mmdebstrap and a Docker daemon. MIRROR and SUITE pick the archive.
set -euo pipefail

MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
BASE_TAG=${VECSERVE_DEBIAN_IMAGE:-vecserve-debian:$SUITE}
REDIS_TAG=${VECSERVE_REDIS_IMAGE:-vecserve-redis:$SUITE}

# Documentation, man pages and translations are never read in a container.
SLIM=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'
)

base() {
  # The apt variant keeps apt, so the Dockerfile's builder stage can install a compiler.
  mmdebstrap --quiet --variant=apt --include=python3,python3-venv,ca-certificates \
    "${SLIM[@]}" "$SUITE" - "$MIRROR" \
    | docker import --change 'CMD ["/bin/bash"]' - "$BASE_TAG" >/dev/null
  echo "built $BASE_TAG"
}

redis() {
  # On the base image: it only adds Debian's redis-server (docker/redis.Dockerfile).
  DOCKER_BUILDKIT=0 docker build --quiet --network host --build-arg BASE_IMAGE="$BASE_TAG" \
    --tag "$REDIS_TAG" --file "$(dirname "$0")/redis.Dockerfile" "$(dirname "$0")" >/dev/null
  echo "built $REDIS_TAG"
}

for what in "${@:-base redis}"; do
  for w in $what; do "$w"; done
done
