# Two entry points a newcomer needs: `make demo` and `make test`.
# Each creates (or refreshes, when pyproject.toml changes) the local
# virtual environment in .venv, so a second run reuses it. The demo installs
# what it needs alone (the `demo` extra); the tests everything (`test`).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp

# Front-end: npm workspace (widgets/, ui-tests/), bundles for the Python package,
# and Debian's Chromium for the browser tests.
NPM_STAMP := node_modules/.installed-stamp
STATIC := kernel_cluster/jupyter/static
LABEXT := kernel_cluster/labextension
BUNDLES := $(STATIC)/widget.js $(STATIC)/report.js $(STATIC)/widget.css $(LABEXT)/package.json
WIDGET_SOURCES := $(wildcard widgets/src/*) widgets/build.mjs widgets/package.json \
	$(wildcard labextension/src/*) $(wildcard labextension/style/*) $(wildcard labextension/schema/*) \
	labextension/build.mjs labextension/package.json
# the venv's JupyterLab loads the extension from the checkout (as `pip install` would
# from the wheel's share/jupyter/labextensions/)
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/@kernel-cluster/lab
CHROMIUM := /usr/bin/chromium
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: demo test lint bench bench-processes venv clean bundles chromium test-js test-ui lab

# HATCH_BUILD_NO_HOOKS: the bundles are built below with npm, not by pip's build hook
# (whose dependencies, JupyterLab among them, are then not fetched for the build)
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	mkdir -p $(LABEXT)  # the wheel's shared-data wants it; the bundles fill it
	HATCH_BUILD_NO_HOOKS=true $(PY) -m pip install --quiet -e ".[test]"
	rm -rf $(LABEXT_LINK)  # the editable install copied it: link the build instead
	mkdir -p $(dir $(LABEXT_LINK))
	ln -s $(CURDIR)/$(LABEXT) $(LABEXT_LINK)
	touch $(STAMP) $(DEMO_STAMP)  # the test extras hold the demo's

# the demo's own needs: the package and numpy, no test tools, no JupyterLab
$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	mkdir -p $(LABEXT)
	HATCH_BUILD_NO_HOOKS=true $(PY) -m pip install --quiet -e ".[demo]"
	touch $(DEMO_STAMP)

venv: $(STAMP) bundles

$(NPM_STAMP): package.json package-lock.json widgets/package.json labextension/package.json ui-tests/package.json
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
	touch $(NPM_STAMP)

# the extension's build asks the venv's jupyterlab for JupyterLab's core packages
$(BUNDLES) &: $(NPM_STAMP) $(WIDGET_SOURCES) $(STAMP)
	KC_PYTHON=$(CURDIR)/$(PY) npm run build

bundles: $(BUNDLES)

chromium:
	@test -x $(CHROMIUM) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# vitest (renderers against a mock model) and the TypeScript type check (the
# extension's needs the renderer library's declarations, made with the bundles)
test-js: $(NPM_STAMP) bundles
	npm run typecheck
	npm test

# a performance report offline, and the widgets in JupyterLab, in headless Chromium
test-ui: $(STAMP) bundles chromium
	cd ui-tests && npx --no-install playwright test

# JupyterLab on the example notebook, with everything it needs installed
lab: $(STAMP) bundles
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) examples/dashboard.ipynb

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy  # kernel_cluster, as [tool.mypy] in pyproject.toml sets it

# tests/test_wheel.py keeps its wheel and environment there for the current sources
WHEEL_CACHE := $(VENV)/wheel-cache

test: lint bundles test-js test-ui
	KC_WHEEL_CACHE=$(CURDIR)/$(WHEEL_CACHE) $(PY) -m pytest

# Benchmarks compare against Dask, which only the benchmark environment has.
$(BENCH_STAMP): pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e ".[bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/run.py

bench-processes: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/processes.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) node_modules $(STATIC) $(LABEXT) widgets/lib labextension/lib
