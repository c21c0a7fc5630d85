"""Components shared by several pages: alert views and the run page's alert callbacks."""
