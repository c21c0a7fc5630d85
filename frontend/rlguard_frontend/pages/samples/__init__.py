"""The samples page and its views."""
