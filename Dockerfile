# hearth in a container: one binary on Debian slim, run as an unprivileged user, its data in the
# /data volume. Build and run (Docker or Podman):
#   docker build -t hearth .
#   docker run -d --name hearth -p 7777:7777 -v hearth-data:/data -e HEARTH_ADMIN__TOKEN=… hearth
# Configuration: the embedded relay.toml, HEARTH_<SECTION>__<KEY> variables, or a file mounted
# at /etc/hearth/relay.toml (then add `--config /etc/hearth/relay.toml` to the command).
# Not built in this repository's CI: its machine has no container engine (docs/src/production.md).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin hearth

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin hearth \
    && install -d -o hearth -g hearth -m 0750 /data
COPY --from=build /src/target/release/hearth /usr/local/bin/hearth
USER hearth
WORKDIR /data
ENV HEARTH_SERVER__BIND=0.0.0.0:7777 \
    HEARTH_STORAGE__DATA_DIR=/data \
    RUST_LOG=info
VOLUME ["/data"]
EXPOSE 7777
# Healthy while the relay answers its NIP-11 document.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD curl -fsS -H 'Accept: application/nostr+json' http://127.0.0.1:7777/ >/dev/null || exit 1
# SIGTERM: the relay finishes in-flight writes, flushes and exits 0; give it the time.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/hearth"]
