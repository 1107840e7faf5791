"""Readers of datasets: list samples, read one, describe it for errors."""
