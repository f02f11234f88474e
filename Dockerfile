# syntax=docker/dockerfile:1
# The one image of dispatch-k8s: the webhook and the agent run from it, and it carries the prologue.
# No Docker engine runs on the development machines, so this file is built where one exists (see README).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements/lock.txt requirements/lock.txt
COPY pyproject.toml README.md ./
COPY contract contract
COPY webhook webhook
COPY agent agent
COPY certs certs
COPY prologue prologue
# Wheels for the project and its pinned dependencies; the final stage installs them without a compiler.
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c requirements/lock.txt .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels dispatch-k8s \
 && pip uninstall -y pip setuptools wheel
# The prologue, also as a plain file, for operators who want to read exactly what runs in their pods.
COPY prologue/dispatch-prologue.sh /usr/share/dispatch-k8s/dispatch-prologue.sh
# A numeric non-root user, so runAsNonRoot can be verified by the kubelet without /etc/passwd.
USER 65532:65532
