"""rlguard service: storage, ingest, series queries, detectors and alerts behind a REST API."""

from importlib.metadata import version

# The distribution's version, whose one source is ``rlguard.__version__`` (the hook's).
__version__ = version("rlguard")
