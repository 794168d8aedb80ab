# stackhook container image.
#
#   docker build -t stackhook:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE_URL=https://example.org/your/stackhook/repo .
#
# Stage 1 builds the release binary on Debian 12 (bookworm); stage 2 copies it into
# distroless cc-debian12 (glibc and libgcc of the same Debian release, no shell, no
# package manager), running as uid/gid 65532.

ARG RUST_VERSION=1

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0

# Dependencies first: with only the manifests, the workspace's library crates and
# placeholder sources, this layer is rebuilt only when Cargo.toml, Cargo.lock or
# crates/ change, not on every edit of the server's own sources.
# benches/floor.rs and benches/engine.rs must exist because Cargo.toml declares those
# bench targets.
COPY Cargo.toml Cargo.lock ./
COPY crates crates
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/floor.rs \
 && echo 'fn main() {}' > benches/engine.rs \
 && cargo fetch --locked \
 && cargo build --release --locked --bin stackhook \
 && rm -rf src benches crates

# The real sources. COPY keeps the files' own modification times, which can be older
# than the placeholder build above; touching the crate roots makes cargo rebuild them.
COPY . .
RUN touch src/main.rs src/lib.rs crates/*/src/lib.rs \
 && cargo build --release --locked --bin stackhook \
 && install -D -m 0755 target/release/stackhook /out/stackhook

FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="stackhook" \
      org.opencontainers.image.description="Cluster API Runtime Extension server and OpenStack infrastructure controllers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=builder /out/stackhook /stackhook

# Numeric, so that Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 65532:65532
# 9443: hooks over HTTPS (--listen); 8080: /healthz, /readyz, /metrics over HTTP
# (--admin-listen).
EXPOSE 9443 8080
ENTRYPOINT ["/stackhook"]
CMD ["serve"]
