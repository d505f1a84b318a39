"""Common helpers: device discovery for data parallelism, hostless set-up, repository files
reached from a checkout, weight identities and the plugin loggers."""
