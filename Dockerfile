# One image for the service, the dashboard and (with EXTRAS including torch) the demo trainer.
FROM python:3.11-slim
ARG EXTRAS=server,postgres
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY trainer_hook trainer_hook
COPY backend backend
COPY frontend frontend
COPY compose compose
COPY migrations migrations
RUN pip install --no-cache-dir ".[${EXTRAS}]"
ENV RLGUARD_DATABASE_URL=sqlite:////data/rlguard.db
VOLUME ["/data"]
EXPOSE 8000
CMD ["rlguard", "up", "--host", "0.0.0.0", "--port", "8000"]
