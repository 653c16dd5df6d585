"""Snapshots turned into what users read: fine-metric frames, profile queries,
task-stream records, time windows, the memory sampler and progress text."""
