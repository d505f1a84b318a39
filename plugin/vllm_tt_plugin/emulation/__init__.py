"""Host-emulated TT mesh: a first-class mode for running the plugin with no TT hardware."""
