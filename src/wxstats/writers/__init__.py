"""Output writers: they know statistics, never the layout of a source's files."""
