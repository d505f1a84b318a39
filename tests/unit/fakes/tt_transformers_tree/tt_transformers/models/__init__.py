"""tt-transformers' model packages: three generators, one per form the plugin must tell apart."""
