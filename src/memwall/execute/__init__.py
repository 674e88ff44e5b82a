"""Many cases: the only process pool (local processes and Dask), the store of a sweep folder,
the feeder that hands out its cases, and the sweep and validation that submit their cases
here."""
