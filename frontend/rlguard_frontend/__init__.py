"""rlguard dashboard: Dash pages that read everything through the REST API."""

from importlib.metadata import version

from rlguard_frontend.app import create_dash_app

__all__ = ["create_dash_app"]
# The distribution's version, whose one source is ``rlguard.__version__`` (the hook's).
__version__ = version("rlguard")
