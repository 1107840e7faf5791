"""Looking at statistics and datasets: report, figure, checks, compare, inspect, example.

Built on the readers of :mod:`wxstats.io` and on the runtime; nothing here computes.
"""
