"""Small typed fakes of TT model classes, for config-level tests (no device, no weights)."""
