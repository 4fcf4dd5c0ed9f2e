# The provisioner image: slim Python, dependencies only, non-root, no build tools at runtime.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml ./
COPY provisioner ./provisioner
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --upgrade pip==25.3 \
 && /opt/venv/bin/pip install --no-cache-dir .

FROM python:3.11-slim
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
EXPOSE 8080
ENTRYPOINT ["local-path-storage-provisioner"]
CMD ["start", "--config", "/etc/config/config.json"]
