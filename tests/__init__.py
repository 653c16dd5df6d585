import os

# Numeric libraries in the tests' own process (embedded workers, dask's local
# scheduler) use one thread each, as the engine's worker processes do: OpenBLAS's
# threads spin while they wait for work, and beside other busy processes a QR of a
# second took minutes (44 s against 3.4 s on a loaded two-core machine). Set before
# any test module imports numpy; a value the user set is kept.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
