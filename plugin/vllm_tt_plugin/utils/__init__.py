"""Common helpers (device discovery, hostless set-up)."""
