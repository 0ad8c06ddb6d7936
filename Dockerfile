# syntax=docker/dockerfile:1
# crescentd image: a builder stage with the Rust toolchain, then a slim runtime running
# crescentd as a non-root user with the data dir on a volume (docs/operations.md, "Docker").

FROM rust:1.95-slim-bookworm AS builder
# protoc and its headers: the build needs them (README.md, "The two commands"). Package
# versions follow the pinned Debian release of the base image.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin crescentd --bin crescent --bin crescent-replay \
 && install -D -m 0755 -t /out target/release/crescentd target/release/crescent target/release/crescent-replay

FROM debian:bookworm-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 crescent \
 && useradd --system --uid 10001 --gid crescent --home-dir /var/lib/crescent --shell /usr/sbin/nologin crescent \
 && install -d -o crescent -g crescent -m 0750 /var/lib/crescent
COPY --from=builder /out/ /usr/local/bin/
USER 10001:10001
# HTTP API (with /healthz and /metrics) and the RPC fast path on fixed ports; a non-loopback
# listener needs a signing key (CRESCENT_AUTH_SECRET_FILE, docs/security.md) or
# CRESCENT_INSECURE=true.
ENV CRESCENT_DATA_DIR=/var/lib/crescent \
    CRESCENT_LISTEN=0.0.0.0:7480 \
    CRESCENT_RPC_LISTEN=0.0.0.0:7481
VOLUME ["/var/lib/crescent"]
EXPOSE 7480 7481
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/crescentd"]
