# syntax=docker/dockerfile:1
# The muster controller image: `muster run` (webhook, queue controller, status service, metrics).
#   docker build -t muster:0.1.0 .
# Deployed by manifests/ (see docs/install.md). Not built by this repository's tests: the
# development machine has no container engine.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A virtualenv copied whole into the runtime stage: same Python path in both stages, no compiler
# or pip cache left behind.
RUN python -m venv /opt/muster
WORKDIR /src
COPY pyproject.toml README.md ./
COPY muster/ muster/
COPY admission/ admission/
COPY webhook/ webhook/
COPY policies/ policies/
COPY simulator/ simulator/
RUN /opt/muster/bin/pip install .

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="muster" \
      org.opencontainers.image.description="Gang-aware queue admission controller for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric non-root user, so `runAsNonRoot` can verify it without a passwd lookup.
RUN groupadd --system --gid 65532 muster \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin muster
COPY --from=build /opt/muster /opt/muster
# No .pyc writes: the root filesystem is read-only in the Deployment.
ENV PATH=/opt/muster/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# webhook (TLS), status service, Prometheus metrics
EXPOSE 9443 8081 8082
ENTRYPOINT ["muster", "run"]
