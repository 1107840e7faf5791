"""The exact core: fixed-point arithmetic, the kernel, the exact combiner, the result model.

Pure computation on arrays: no files, no processes, no command line.
"""
