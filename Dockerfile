# syntax=docker/dockerfile:1
#
# The Hymical delivery server on one SQLite file, as a container:
#
#   docker build -t hymical .
#   docker run -d --name hymical -p 8080:8080 -v hymical-data:/var/lib/hymical \
#     -e FORMS_SERVER_ADMIN_TOKEN="$(openssl rand -hex 32)" --stop-timeout 90 hymical
#
# Build it from a git clone (not a linked worktree) with its .git in the
# context: the version `hymical version` prints is the one the Go toolchain
# stamps from git (see .ci/build.sh). docs/packaging.md says more.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# The modules first, in a layer of their own, so a change to the source
# does not download them again.
COPY go.mod go.sum go.work go.work.sum ./
COPY sdk/go.mod sdk/go.sum ./sdk/
RUN go mod download
COPY . .
# The same script builds the release archives: one static binary, hymical,
# which runs every shipped transport as a child process of itself.
RUN .ci/build.sh /out
# The state directory, created here because the runtime image has no shell;
# owned by distroless's nonroot user (65532), which runs the server.
RUN install -d -m 0700 -o 65532 -g 65532 /state

# Distroless static: CA certificates (for HTTPS receivers), time zones and
# /etc/passwd with the nonroot user; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/LICENSE /usr/share/doc/hymical/LICENSE
COPY --from=build /out/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /state /var/lib/hymical
USER 65532:65532
# Configuration comes from FORMS_* variables (or a file passed with
# --config): the database on the volume, the API on every interface of the
# container. The admin token is not in the image: give it in the
# environment (FORMS_SERVER_ADMIN_TOKEN). Without one, serve makes up a
# token for that run only and prints it once. Insecure dev mode stays off.
#
# THE SECRETS KEY IS ON THE DATA VOLUME BY DEFAULT: with no key configured,
# the first start writes it beside the database, to
# /var/lib/hymical/hymical.db.key, so a copy of the volume carries both the
# database and the key that opens its endpoint secrets. That is the price of
# a first `docker run` that needs nothing else; moving the key off the
# volume by default would make that run refuse to start. For production,
# give the key apart from the volume (FORMS_SECRETS_KEY_FILE pointing at a
# Docker or Kubernetes secret, or FORMS_SECRETS_KEY): docs/packaging.md.
ENV FORMS_DATABASE_URL=sqlite:/var/lib/hymical/hymical.db \
    FORMS_SERVER_LISTEN=0.0.0.0:8080
VOLUME ["/var/lib/hymical"]
EXPOSE 8080
# No HEALTHCHECK: the image has no shell or HTTP client to run one. Probe
# GET /healthz (alive) and GET /readyz (database answers, schema known)
# from the orchestrator instead; neither needs the token.
# serve stops on SIGTERM within about the worker lease plus 10 s (70 s with
# the defaults): give `docker stop` that long (--stop-timeout 90).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/hymical"]
CMD ["serve"]
