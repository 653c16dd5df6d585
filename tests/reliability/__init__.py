"""Reliability: hangs, silent losses and leaks found by trying the engine as a user would.

Each test here reproduces one case that failed before its fix, with real worker
processes, files and sockets, bounded in time.
"""
