# slotcron/jaeger:dev: Jaeger v2 all-in-one (in-memory storage) with its web UI, as built by
# jaeger.sh from the Go module proxy. build.sh stages the context: jaeger (the binary), ui/ (the
# UI's assets) and config.yaml (jaeger's all-in-one.yaml, serving ui/ from /usr/share/jaeger-ui).
ARG BASE=slotcron/debian-base:bookworm
FROM ${BASE}
COPY jaeger /usr/local/bin/jaeger
COPY ui/ /usr/share/jaeger-ui/
COPY config.yaml /etc/jaeger/config.yaml
# all-in-one.yaml listens on JAEGER_LISTEN_HOST, localhost by default: unreachable through -p.
ENV JAEGER_LISTEN_HOST=0.0.0.0
USER 10001:10001
# 16686 UI and query API, 4317 OTLP gRPC, 4318 OTLP HTTP
EXPOSE 16686 4317 4318
ENTRYPOINT ["/usr/local/bin/jaeger", "--config", "/etc/jaeger/config.yaml"]
