# The eyrie image: `eyrie worker`, `eyrie applier` and every other command. docker-compose.yml builds it.
FROM python:3.11-slim
WORKDIR /app
# Dependencies first, in a layer built from pyproject.toml alone: a change to the code rebuilds only the
# layers after it, and only a change to pyproject.toml reinstalls the dependencies.
COPY pyproject.toml ./
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(*deps, sep=chr(10))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
RUN useradd --create-home eyrie && mkdir -p /data && chown eyrie /data
# Then the sources, and the package itself without its dependencies (the layer above has them).
COPY README.md ./
COPY schemas schemas
COPY portraits portraits
COPY policies policies
COPY evaluation evaluation
COPY streams streams
RUN pip install --no-cache-dir --no-deps .
USER eyrie
# Faust's tables (RocksDB with EYRIE_STORE=rocksdb://) live here; docker-compose.yml mounts a named volume.
ENV EYRIE_DATA_DIR=/data
# `eyrie worker|applier --web-port 6066 --web-host 0.0.0.0`: /metrics and /health.
EXPOSE 6066
ENTRYPOINT ["eyrie"]
