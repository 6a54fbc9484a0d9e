# Debian's redis-server, answering to the names docker-compose.yml uses (valkey-server,
# valkey-cli), in /data: a stand-in for valkey/valkey where no registry is reachable. Like
# that image it starts as root and its entrypoint hands /data to its user (redis) before
# running the server as that user (docker/redis-entrypoint.sh). Built by
# docker/debian-images.sh on its Debian base image.
ARG BASE_IMAGE=vecserve-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s redis-server /usr/bin/valkey-server \
    && ln -s redis-cli /usr/bin/valkey-cli \
    && install -d -o redis -g redis /data
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["redis-entrypoint.sh"]
CMD ["valkey-server"]
