"""Running a computation: one orchestration for any number of processes.

Options, the engine of one rank, the world (one process or a distributed job),
launchers, monitoring, checkpoints, progress.
"""
