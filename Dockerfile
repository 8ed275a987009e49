# The worker image: cmd/worker built static (CGO_ENABLED=0, time zones embedded), run as a
# non-root user (65532, distroless's "nonroot") on an empty base.
#
# With Docker Hub (or any registry) access:
#
#   docker build -t slotcron/worker:dev \
#     --build-arg BUILDER=golang:1.26 \
#     --build-arg BASE=gcr.io/distroless/static-debian12:nonroot .
#
# With no registry, deploy/images/build.sh builds it from slotcron/golang:1.26 (Debian bookworm
# and this machine's Go toolchain) onto scratch, which needs no pull. It also stages the context
# with a vendor/ directory made on the host and passes GOFLAGS=-mod=vendor, so the build reaches
# no network; otherwise the modules come from the Go module proxy during the build.
#
#   docker run --rm -p 8080:8080 -v $PWD/config.yaml:/etc/slotcron/config.yaml:ro slotcron/worker:dev
ARG BUILDER=slotcron/golang:1.26
ARG BASE=scratch

FROM ${BUILDER} AS build
ARG GOFLAGS=""
WORKDIR /src
COPY go.mod go.sum ./
RUN case " $GOFLAGS " in *" -mod=vendor "*) ;; *) go mod download ;; esac
COPY . .
RUN CGO_ENABLED=0 go build -buildvcs=false -trimpath -tags timetzdata -ldflags='-s -w' \
      -o /out/worker ./cmd/worker \
 && mkdir -p /out/etc/ssl/certs /out/etc/slotcron \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/

FROM ${BASE}
# CA certificates, for TLS to Redis or to the OTLP collector.
COPY --from=build /out/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/slotcron/ /etc/slotcron/
COPY --from=build /out/worker /usr/local/bin/worker
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["run", "-config", "/etc/slotcron/config.yaml"]
