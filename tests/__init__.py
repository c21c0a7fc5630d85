"""rlguard's test suite (a regular package, so a wheel that ships a top-level ``tests`` package,
as verl 0.9.1 does, cannot shadow it)."""
