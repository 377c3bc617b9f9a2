# syntax=docker/dockerfile:1
#
# mcpgw container images. Two targets share one builder stage:
#
#   docker build -t mcpgw:latest .                                                  # default target: runtime
#   docker build --target runtime-node-python -t mcpgw:node-python .                # + Node.js (npx) and Python (uv, uvx)
#
# Both run as the non-root user 10001 with GW_CONFIG_PATH=/app/.gw/docker/gw_mcp_config.json and expose 8000 (MCP
# gateway), 8001 (admin API) and 9464 (metrics, /healthz, /readyz); GW_ADMIN_ADDR=0.0.0.0:8001 in the image (the binary's
# own default is loopback, which a published port cannot reach: publish 8001 only where it is needed). Without a config file at that path, `mcpgw serve`
# writes a fresh one and prints its keys once to stderr; mount a config (a volume, a Kubernetes Secret) for anything
# that lasts. The root filesystem can be read-only: the gateway writes only next to its config file.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm
ARG NODE_VERSION=22
ARG UV_VERSION=0.9

# ---------------------------------------------------------------------------------------------------------------------
# builder: the release binary, built exactly as locked. The cache mounts keep the registry and target/ between builds.
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
# make builds the allocator, jemalloc, from source (the slim image has gcc but not make).
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mcpgw \
 && install -D -m 0755 target/release/mcpgw /out/usr/local/bin/mcpgw \
 && install -d -m 0700 /out/app/.gw/docker \
 && install -d -m 0700 /out/home/mcpgw

# ---------------------------------------------------------------------------------------------------------------------
# runtime-node-python: for stdio upstream servers started with `npx` (Node.js) or `uvx` (Python). Upstream processes
# get a minimal environment (PATH, HOME, LANG, TZ, TMPDIR), so their caches live under HOME=/home/mcpgw; on Kubernetes
# with a read-only root filesystem mount an emptyDir there (the manifests and the Helm chart do).
FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

FROM node:${NODE_VERSION}-${DEBIAN_RELEASE}-slim AS runtime-node-python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /home/mcpgw --shell /usr/sbin/nologin mcpgw
COPY --from=uv /uv /uvx /usr/local/bin/
COPY --from=builder /out/usr/local/bin/mcpgw /usr/local/bin/mcpgw
COPY --from=builder --chown=10001:10001 /out/app /app
COPY --from=builder --chown=10001:10001 /out/home /home
ENV GW_CONFIG_PATH=/app/.gw/docker/gw_mcp_config.json \
    GW_ADMIN_ADDR=0.0.0.0:8001 \
    HOME=/home/mcpgw \
    UV_PYTHON_PREFERENCE=only-system
WORKDIR /app
USER 10001:10001
EXPOSE 8000 8001 9464
ENTRYPOINT ["mcpgw"]
CMD ["serve"]

# ---------------------------------------------------------------------------------------------------------------------
# runtime (default, last stage): distroless with glibc and CA certificates (outbound HTTPS to guardrail, auth and OAuth
# services), no shell, no package manager.
FROM gcr.io/distroless/cc-debian12 AS runtime
COPY --from=builder /out/usr/local/bin/mcpgw /usr/local/bin/mcpgw
COPY --from=builder --chown=10001:10001 /out/app /app
COPY --from=builder --chown=10001:10001 /out/home /home
ENV GW_CONFIG_PATH=/app/.gw/docker/gw_mcp_config.json \
    GW_ADMIN_ADDR=0.0.0.0:8001 \
    HOME=/home/mcpgw
WORKDIR /app
USER 10001:10001
EXPOSE 8000 8001 9464
ENTRYPOINT ["mcpgw"]
CMD ["serve"]
