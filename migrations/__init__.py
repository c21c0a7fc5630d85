"""Alembic environment and versions: the only source of rlguard's schema (shipped in the wheel)."""
