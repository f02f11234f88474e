# The one image of dispatch-k8s: the chart runs dispatch-webhook, dispatch-agent and dispatch-certs from it,
# and it carries the prologue. Where no registry is reachable, scripts/build-image builds this file on a local
# Debian base with a wheelhouse (no `# syntax=` line: it would make BuildKit fetch a frontend image); tier C
# runs the result on a real kubelet, and tests/charts/test_image.py checks what can be checked without an engine.
#
# The base is pinned by tag. For a release, pin its digest too, so a re-pushed tag cannot change the image:
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm        # prints the index digest
#   docker build --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest> -t dispatch-k8s:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# -- build: wheels of the project and of its dependencies at the versions of requirements/lock.txt -----
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements/lock.txt requirements/lock.txt
COPY pyproject.toml README.md VERSION LICENSE ./
# Every package of [tool.setuptools.packages.find] (tests/charts/test_image.py keeps this list complete).
COPY contract contract
COPY serving serving
COPY webhook webhook
COPY agent agent
COPY certs certs
COPY prologue prologue
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c requirements/lock.txt .

# -- final: the wheels installed, then pip itself removed; no compiler, no build tools, no sources -----
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dispatch-k8s" \
      org.opencontainers.image.description="dispatch's admission webhook, readmission gate agent and certificate controller" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels dispatch-k8s \
 && pip uninstall -y pip setuptools wheel
# The prologue, also as a plain file, for operators who want to read exactly what runs in their pods.
COPY prologue/dispatch-prologue.sh /usr/share/dispatch-k8s/dispatch-prologue.sh
# A numeric non-root user and group (the chart's runAsUser/runAsGroup), so the kubelet can verify
# runAsNonRoot without /etc/passwd.
USER 65532:65532
