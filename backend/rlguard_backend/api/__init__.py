"""REST API v1: thin handlers over the repository."""
