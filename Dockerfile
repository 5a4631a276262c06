# quetta-bench as a container image, for sharded runs on Kubernetes (`quetta-bench k8s`).
#   docker build -t registry.example/quetta:0.1 .
# Multi-stage: the release build in the Rust image, the binary alone on distroless (glibc,
# CA certificates, no shell), run as the image's non-root user.
FROM rust:1.85-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p quetta-bench \
    && cp target/release/quetta-bench /quetta-bench

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /quetta-bench /usr/local/bin/quetta-bench
USER nonroot:nonroot
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/quetta-bench"]
