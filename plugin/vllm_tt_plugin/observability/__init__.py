"""Observability: the plugin's Prometheus metrics, host time by phase, block metrics and the
runner's per-step recorder, kept apart from the work they measure (docs/METRICS.md)."""
