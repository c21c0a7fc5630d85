"""rlguard service: storage, ingest, series queries, detectors and alerts behind a REST API."""

__version__ = "0.1.0"
