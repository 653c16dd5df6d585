"""JupyterLab server for the Galata tests: no token, a fresh root dir, runs as root."""

import os

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821 (c is the config object Jupyter passes in)
# KC_LAB_PORT: another port when 8888 is taken (playwright.config.js reads it too)
c.ServerApp.port = int(os.environ.get("KC_LAB_PORT", "8888"))  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821
c.ServerApp.open_browser = False  # noqa: F821
c.LabApp.news_url = None  # noqa: F821
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"  # noqa: F821
