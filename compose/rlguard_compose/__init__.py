"""``rlguard up``: the API and the dashboard composed into one ASGI app on one port.

Neither component imports the other; this package, the only composition root, imports both:
``serve`` holds ``rlguard up``, ``dashboard`` holds ``rlguard dashboard``.
"""

from rlguard_compose.serve import combined_app, start_background

__all__ = ["combined_app", "start_background"]
