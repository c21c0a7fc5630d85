"""rlguard dashboard: Dash pages that read everything through the REST API."""

from rlguard_frontend.app import create_dash_app

__all__ = ["create_dash_app"]
