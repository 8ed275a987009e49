# slotcron/golang:1.26: the build stage of the worker image where golang:1.26 can't be pulled.
# The build context is this machine's GOROOT (build.sh passes `go env GOROOT`), copied over
# slotcron/debian-base with the CA certificates that `go mod download` needs for the proxy.
ARG BASE=slotcron/debian-base:bookworm
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/log/*
COPY . /usr/local/go
ENV GOROOT=/usr/local/go GOPATH=/go GOTOOLCHAIN=local \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
