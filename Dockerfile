# Ferry in a small runtime image, laid out as scripts/install.sh lays it out:
#   /usr/local/bin/ferry, /usr/local/etc/ferry/config.json (a volume), /usr/local/share/ferry
#   (geoip.dat / geosite.dat, a volume; Ferry downloads none).
#
#   docker build -t ferry .
#   docker run -d --name ferry --network host \
#     -v /usr/local/etc/ferry:/usr/local/etc/ferry:ro -v /usr/local/share/ferry:/usr/local/share/ferry:ro ferry
#   docker kill -s HUP ferry     # re-reads the config, live connections kept
#
# Host networking is what a proxy server usually wants (every port, the client's real
# address); with `-p 443:443` instead, publish each inbound's port (and `/udp` for UDP ones).
# The build stage's Rust must be at least the workspace's rust-version.
FROM rust:1.95-slim-bookworm AS build
# AWS-LC (under rustls and quinn) builds with cmake where its prebuilt path does not apply.
RUN apt-get update && apt-get install -y --no-install-recommends cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p ferry --bin ferry && strip --strip-debug target/release/ferry

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /usr/local/etc/ferry /usr/local/share/ferry \
    && echo '{}' > /usr/local/etc/ferry/config.json
COPY --from=build /src/target/release/ferry /usr/local/bin/ferry
ENV XRAY_LOCATION_ASSET=/usr/local/share/ferry
VOLUME ["/usr/local/etc/ferry", "/usr/local/share/ferry"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ferry"]
CMD ["run", "-c", "/usr/local/etc/ferry/config.json"]
