# Image of agent-sandbox-controller, the Python controller for Agent Sandbox.
#
#   nox -s build                      # writes the four wheels into dist/
#   docker build -t kube-agent-sandbox-controller:0.1.0 \
#     --build-arg GIT_COMMIT=$(git rev-parse HEAD) \
#     --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# The image installs the controller and the extension controllers (enabled with
# --extensions) from dist/ plus their dependencies from the package index, with the
# controller's tracing extra (OpenTelemetry, for --enable-tracing). It runs as a
# non-root user and writes nothing outside /tmp, so it works with readOnlyRootFilesystem and
# an emptyDir on /tmp (see manifests/controller/deployment.yaml).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS install
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY dist/ /wheels/
# Install the wheel files by path (never by name from the index, where someone else could
# publish a package with the same name). pip compiles the bytecode now, because the running
# container cannot write __pycache__ directories. The controller's wheel is resolved first so
# its "[tracing]" extra is not read by the shell as a glob's character class.
RUN controller=$(echo /wheels/kube_agent_sandbox_controller-*.whl) \
    && python -m venv /opt/agent-sandbox \
    && /opt/agent-sandbox/bin/pip install \
        /wheels/kube_agent_sandbox_api_types-*.whl \
        "${controller}[tracing]" \
        /wheels/kube_agent_sandbox_extensions-*.whl \
    && /opt/agent-sandbox/bin/python -c "import opentelemetry.sdk.trace" \
    && /opt/agent-sandbox/bin/agent-sandbox-controller --version

FROM ${PYTHON_IMAGE}
ARG GIT_COMMIT=""
ARG BUILD_DATE=""
LABEL org.opencontainers.image.title="agent-sandbox-controller" \
      org.opencontainers.image.description="Kubernetes controller for Agent Sandbox (Python)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=install /opt/agent-sandbox /opt/agent-sandbox
ENV PATH=/opt/agent-sandbox/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    AGENT_SANDBOX_GIT_COMMIT=${GIT_COMMIT} \
    AGENT_SANDBOX_BUILD_DATE=${BUILD_DATE}
# Numeric user, so the kubelet can verify runAsNonRoot; 65532 is the usual "nonroot" id.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081 9443
ENTRYPOINT ["agent-sandbox-controller"]
