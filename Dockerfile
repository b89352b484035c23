# The server's image: `conductor server` from this checkout (docs/self-host.md,
# "Containers"), on an existing PostgreSQL (DATABASE_URL). From the root:
#   docker build -t conductor .
# compose.yaml runs it with PostgreSQL. Dockerfile.dockerignore keeps the
# context to what the server runs from.
FROM node:20-bookworm-slim

# git reads pipeline files of repositories given as local paths; tini is
# PID 1 and passes SIGTERM on, for the server's drain.
RUN apt-get update \
  && apt-get install -y --no-install-recommends ca-certificates git tini \
  && rm -rf /var/lib/apt/lists/*

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/conductor \
    --shell /usr/sbin/nologin conductor

WORKDIR /opt/conductor
COPY package.json package-lock.json ./
# Production dependencies only (tsx runs the TypeScript; no build step).
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY tsconfig.json ./
COPY lib lib
COPY local local
COPY functions functions
COPY runner runner
COPY scripts scripts
COPY migrations migrations
COPY LICENSE ./

USER conductor
ENV CONDUCTOR_HOST=0.0.0.0 \
    PORT=8080 \
    CONDUCTOR_DATA_DIR=/var/lib/conductor
VOLUME /var/lib/conductor
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD node -e "fetch('http://127.0.0.1:8080/v1/ready').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--import", "tsx", "scripts/server.ts"]
