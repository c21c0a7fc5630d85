"""Detection in the service: feeding detectors, checkpoints, backtests, alerts, webhooks."""
