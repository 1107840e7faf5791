"""Running a computation: one orchestration for any number of processes.

Options, the engine of one rank, run identities, checkpoints, states; the
world it runs in (one process or a distributed job) is :mod:`wxstats.parallel`.
"""
