# Stand-ins for the compose lab's official base images, on a Debian root file system imported by
# tests/compose/engine.py (no registry is reachable). Each target plays one official image's part.
ARG BASE
FROM ${BASE} AS debian
# The machine's own CAs were copied into the root file system; this also fills Java's keystore.
RUN update-ca-certificates
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8

# python:*-slim: a Python whose `pip install` works (Debian's own is externally managed)
FROM debian AS python
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# maven:*-eclipse-temurin-17 and eclipse-temurin:17-jre
FROM debian AS maven
FROM debian AS jre

# redis:*-alpine: redis-server and redis-cli on the PATH
FROM debian AS redis

# prom/prometheus: the binary as entrypoint, data in /prometheus
FROM debian AS prometheus
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
