# stormguard's daemon image: built in a Rust image, run from distroless
# (glibc, no shell, non-root).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin stormguard \
 && cp target/release/stormguard /stormguard

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /stormguard /stormguard
COPY policies/retry-policy.yaml /etc/stormguard/retry-policy.yaml
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/stormguard"]
CMD ["serve", "--listen=0.0.0.0:8080", "--policy=/etc/stormguard/retry-policy.yaml"]
