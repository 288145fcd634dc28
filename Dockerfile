# syntax=docker/dockerfile:1
#
# The mrtr-gateway image: the binary only, on a distroless runtime (no shell, no package
# manager), running as a non-root user. Mount a config at /etc/mrtr-gateway/gateway.toml whose
# listeners are reachable from outside the container and whose admin listener the HEALTHCHECK
# finds: [server] listen = "0.0.0.0:8080", [admin] listen = "0.0.0.0:9090" (the defaults are
# loopback, and no admin listener).
#
#   docker build -t mrtr-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -v "$PWD/gateway.toml:/etc/mrtr-gateway/gateway.toml:ro" mrtr-gateway:0.1.0
#
# deploy/README.md explains the Kubernetes manifests and how to derive an image that also
# carries a stdio legacy server.

FROM rust:1-slim-bookworm AS builder
WORKDIR /build

# Build the dependencies alone first, against stub sources: this layer is reused until a
# manifest or Cargo.lock change, so editing src/ recompiles only the workspace's crates. The
# workspace is the gateway and the built-in legacy server it carries (fixtures/legacy-server),
# so both manifests come. The gateway's manifest names the benchmarks, so their sources come
# too (cargo checks that each target it names exists; nothing here builds them).
COPY Cargo.toml Cargo.lock ./
COPY fixtures/legacy-server/Cargo.toml ./fixtures/legacy-server/
COPY benches ./benches
RUN mkdir src fixtures/legacy-server/src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs fixtures/legacy-server/src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src fixtures/legacy-server/src

COPY fixtures/legacy-server/src ./fixtures/legacy-server/src
COPY src ./src
# COPY keeps the build context's mtimes, which can be older than the stubs' build artefacts;
# touching the roots makes cargo rebuild both crates from the real sources.
RUN touch src/main.rs src/lib.rs fixtures/legacy-server/src/lib.rs \
 && cargo build --release --locked --bin mrtr-gateway

# cc: glibc and libgcc, which the binary links against; :nonroot runs as uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /build/target/release/mrtr-gateway /usr/local/bin/mrtr-gateway
USER 65532:65532
# 8080: the MCP endpoint ([server] listen); 8081: retries forwarded between replicas
# ([fleet] internal_listen); 9090: /healthz, /readyz, /metrics ([admin] listen).
EXPOSE 8080 8081 9090
# No curl here: the binary probes its own admin listener (exit 0 only on 200 within 2 s).
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/mrtr-gateway", "health", "--url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["/usr/local/bin/mrtr-gateway"]
CMD ["serve", "--config", "/etc/mrtr-gateway/gateway.toml"]
