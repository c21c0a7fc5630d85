"""One module per page, each with ``layout()`` and ``register(app, client)`` for its callbacks."""
