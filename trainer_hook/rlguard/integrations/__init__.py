"""Framework integrations, each imported only by its users.

- ``rlguard.integrations.transformers.RLGuardCallback``: TRL and transformers trainers.
- ``rlguard.integrations.verl``: follow the ``file`` logger's JSONL, or patch ``Tracking.log``.
- ``rlguard.integrations.importers``: readers of finished runs' logs for ``rlguard import``.
"""
