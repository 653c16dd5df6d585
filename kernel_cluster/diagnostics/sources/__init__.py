"""What implements ``DiagnosticsSource``: this engine (``engine_source``), a Dask
cluster (``dask_source``) and the plugin that source installs on Dask's scheduler
(``dask_plugin``, which stands alone there)."""
