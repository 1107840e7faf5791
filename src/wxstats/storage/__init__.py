"""Chunked reading of stored arrays (zarr, HDF5/netCDF4, local or fsspec): the
bytes and codecs of each chunk, shared by the xarray and anemoi sources.

Knows nothing of sources: it reads slabs of arrays it is pointed at.
"""
