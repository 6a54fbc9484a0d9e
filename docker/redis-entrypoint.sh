#!/bin/sh
# Entrypoint of the Debian stand-in for valkey/valkey (docker/redis.Dockerfile), doing what
# that image's entrypoint does: started as root with valkey-server, it hands /data (the
# volume, and the ACL file the compose stack's acl service wrote there as root) to user
# redis and runs the server as that user; anything else runs as given.
set -e
if [ "$1" = valkey-server ] && [ "$(id -u)" = 0 ]; then
  find /data \! -user redis -exec chown redis:redis '{}' +
  exec setpriv --reuid=redis --regid=redis --clear-groups -- "$@"
fi
exec "$@"
