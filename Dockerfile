# syntax=docker/dockerfile:1
# All binaries of the workspace, one runtime image per binary:
#   docker build --target etcd-backup-operator -t etcd-backup-operator .
#   docker build --target etcd-operator        -t etcd-operator .
#   docker build --target etcd-restore-operator -t etcd-restore-operator .
#   docker build --target etcd-backup          -t etcd-backup .
#   docker build --target mysql-backup         -t mysql-backup .

FROM rust:1.95-bookworm AS builder
# etcd-client's build runs protoc and needs the well-known .proto files.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
      -p etcd-backup -p etcd-backup-operator -p etcd-operator -p etcd-restore-operator \
      -p mysql-backup \
 && mkdir /out \
 && cp target/release/etcd-backup target/release/etcd-backup-operator target/release/etcd-operator \
       target/release/etcd-restore-operator target/release/mysql-backup /out/

# glibc binaries (aws-lc, zstd): distroless "cc" has libc and libgcc, no shell; runs as
# nonroot (65532).
FROM gcr.io/distroless/cc-debian12:nonroot AS etcd-backup
COPY --from=builder /out/etcd-backup /usr/local/bin/etcd-backup
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-backup"]

FROM gcr.io/distroless/cc-debian12:nonroot AS etcd-backup-operator
COPY --from=builder /out/etcd-backup-operator /usr/local/bin/etcd-backup-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/etcd-backup-operator"]

FROM gcr.io/distroless/cc-debian12:nonroot AS etcd-operator
COPY --from=builder /out/etcd-operator /usr/local/bin/etcd-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/etcd-operator"]

FROM gcr.io/distroless/cc-debian12:nonroot AS etcd-restore-operator
COPY --from=builder /out/etcd-restore-operator /usr/local/bin/etcd-restore-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/etcd-restore-operator"]

# mysql-backup runs mariadb-backup, so its image carries that tool (no distroless variant); a
# restore to a point in time replays binary logs with mariadb-binlog (mariadb-client) into a
# private server (mariadbd, mariadb-server-core) on the restored data.
FROM debian:bookworm-slim AS mysql-backup
RUN apt-get update \
 && apt-get install -y --no-install-recommends mariadb-backup mariadb-server-core mariadb-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=builder /out/mysql-backup /usr/local/bin/mysql-backup
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mysql-backup"]
