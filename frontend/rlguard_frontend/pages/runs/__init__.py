"""The runs page: its grid and columns."""
