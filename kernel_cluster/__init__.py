"""kernel-cluster: a task engine in the Jupyter kernel, instrumented end to end."""
