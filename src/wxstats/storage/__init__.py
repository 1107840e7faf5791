"""Reading stored arrays at the speed of the storage: zarr and HDF5/netCDF4
chunk by chunk, local or fsspec, and read-ahead into the page cache; shared by
the xarray, anemoi and MEPS sources.

Knows nothing of sources: it reads the arrays and files it is pointed at.
"""
