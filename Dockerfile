# healer's container image: `healer loop` as a non-root user, with the detection engine's
# native fast paths compiled in. Both stages install through scripts/setup.sh, the script CI
# runs before the tests (`make setup-test`), so what the image holds is what was tested.
#   docker build -t healer .          then deploy/kubernetes/ (docs/deploy.md)

# -- build: a venv in /opt/healer with healer and its dependencies, _speedups compiled -----
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY . .
# The compiler and headers come in here only; the final stage gets the finished venv.
RUN VENV=/opt/healer scripts/setup.sh --image \
 && /opt/healer/bin/python -c "import healer.detect._speedups"

# -- run: the venv, git and bubblewrap; no compiler, no source tree ------------------------
FROM python:3.11-slim-bookworm
COPY scripts/setup.sh scripts/apt_install.sh /tmp/setup/scripts/
RUN /tmp/setup/scripts/setup.sh --runtime \
 && rm -rf /tmp/setup /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 healer \
 && useradd --system --uid 10001 --gid healer --create-home --home-dir /home/healer healer \
 && install -d -o healer -g healer -m 0700 /var/lib/healer
COPY --from=build /opt/healer /opt/healer
ENV PATH=/opt/healer/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/home/healer
USER 10001:10001
# healer's relative default dirs (.healer, .fleet-messages) land here; settings may move them.
WORKDIR /var/lib/healer
EXPOSE 8083
# Liveness as a probe would ask it (Kubernetes uses its own probes: deploy/kubernetes/).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('HEALER_PORT', '8083') + '/health', timeout=4)"]
ENTRYPOINT ["healer"]
CMD ["loop"]
