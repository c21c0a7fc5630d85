"""Process infrastructure: app factory, settings, database, serving, auth, limits, logs."""
