# slotcron/redis:7: Debian bookworm's redis-server (7.0.x) over slotcron/debian-base, for tests
# (internal/redistest) and local runs where the redis image can't be pulled. Built by build.sh.
ARG BASE=slotcron/debian-base:bookworm
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/log/* \
 && mkdir /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
# No config file: Debian's /etc/redis/redis.conf binds 127.0.0.1 and daemonizes. Listen on every
# interface with protected mode off, so a mapped port (docker run -p, testcontainers) answers;
# like the redis image on Docker Hub, it has no password: don't publish it beyond this machine.
CMD ["redis-server", "--protected-mode", "no", "--bind", "0.0.0.0"]
