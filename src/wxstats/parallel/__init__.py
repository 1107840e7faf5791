"""The distributed runner, which never needs a source: launching ranks (torchrun,
Slurm, ``--nproc``), the world they form and its exact gather, liveness,
monitoring and progress.
"""
