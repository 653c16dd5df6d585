"""Self-contained HTML pages: the performance report and the profile page."""
