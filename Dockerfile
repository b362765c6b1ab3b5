# Two stages: build the single binary with the same command CI uses (`bun run build`), then ship only
# that binary on a small distroless base that runs as a non-root user.

FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production
COPY tsconfig.json ./
COPY src ./src
COPY scripts ./scripts
RUN bun run build && mkdir -p /out/data

# glibc and libstdc++ are all the compiled Bun binary needs.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/petstore /usr/local/bin/petstore
# The default data files are ./data/petstore.db and ./data/petstore-staging.db, relative to /.
COPY --from=build --chown=nonroot:nonroot /out/data /data
WORKDIR /
VOLUME ["/data"]
USER nonroot
# In a container, loopback is the container's own: every address, so that -p 8080:8080 reaches it
# (serve's default is 127.0.0.1). Which hosts reach the container is set by how its port is published.
ENV PETSTORE_HOST=0.0.0.0
EXPOSE 8080 8081
# `healthcheck` follows PETSTORE_ENV / PETSTORE_PORT, so a staging container checks port 8081.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/usr/local/bin/petstore", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/petstore"]
CMD ["serve"]
