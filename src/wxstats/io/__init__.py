"""Statistics files: atomic writes, and one module per format with its writer and reader.

Writers know nothing of the sources' file layouts; readers give back the one
result model, :class:`wxstats.core.stats.Stats`.
"""
