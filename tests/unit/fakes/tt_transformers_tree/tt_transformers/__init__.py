"""A stand-in for tenstorrent/tt-transformers, laid out as its modules the plugin reaches are.

Put ``tests/unit/fakes/tt_transformers_tree`` on ``sys.path`` to make it importable. Module,
class and method names, signatures and return forms follow the real files (commits in each
module's docstring); the work behind them is the plugin's reference Llama on the emulated mesh.
"""
