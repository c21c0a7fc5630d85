"""``rlguard up``: the API and the dashboard composed into one ASGI app on one port.

Neither component imports the other; this package imports both. ``serve`` holds the command.
"""

from rlguard_compose.serve import combined_app, start_background

__all__ = ["combined_app", "start_background"]
