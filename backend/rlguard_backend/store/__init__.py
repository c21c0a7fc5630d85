"""Storage: runs, points in chunks and their rollups, series, groups, markers and samples."""
