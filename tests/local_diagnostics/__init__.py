"""Local diagnostics (issue 21): callbacks, get_sync, the profilers and ProgressBar."""
