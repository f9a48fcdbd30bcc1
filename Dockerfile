# The eyrie image: `eyrie worker`, `eyrie applier` and every other command. docker-compose.yml builds it.
FROM python:3.11-slim
WORKDIR /app
# Dependencies first, so code changes do not reinstall them.
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY portraits portraits
COPY policies policies
COPY streams streams
RUN pip install --no-cache-dir . && useradd --create-home eyrie && mkdir -p /data && chown eyrie /data
USER eyrie
ENV EYRIE_DATA_DIR=/data
ENTRYPOINT ["eyrie"]
