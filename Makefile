# `make test` and `make demo` work on a fresh machine: they build .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.voxgate-installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup test demo lint browser-deps teacher-deps teacher-debs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The pinned CPU torch goes in first: afterwards the project's bounded `torch` requirement is
# already met, so pip never pulls a multi-GB CUDA build onto a CPU machine.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Debian's Chromium drives the browser test (playwright never downloads a browser here).
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
				|| echo "warning: could not install chromium; browser tests will be skipped"; \
		else echo "note: /usr/bin/chromium missing; browser tests will be skipped"; fi; \
	fi

# Flite (the voxgate-tiny teacher voice) for the training-pipeline test and the evaluation.
teacher-deps:
	@if ! command -v flite >/dev/null; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq flite >/dev/null) \
				|| echo "warning: could not install flite; the training-pipeline test will be skipped"; \
		else echo "note: flite missing; the training-pipeline test will be skipped"; fi; \
	fi

# The teacher as .deb files, for machines without a registry (training/README.md): unpacked
# there with dpkg -x. Carried to the GPU machine as `.teacher` (git-ignored).
teacher-debs:
	apt-get update -qq || true
	mkdir -p .teacher && cd .teacher && apt-get download flite libflite1 libasound2 libasound2-data wamerican

test: setup browser-deps teacher-deps
	$(BIN)/ruff check gateway engine models training voxbench tests bench
	$(BIN)/ruff format --check gateway engine models training voxbench tests bench
	$(BIN)/python -m pytest -q -m "not gpu" tests

lint: setup
	$(BIN)/ruff check gateway engine models training voxbench tests bench
	$(BIN)/ruff format --check gateway engine models training voxbench tests bench

demo: setup
	@echo "Voxgate demo: open http://$(HOST):$(PORT)/ in a browser once the model has loaded."
	$(BIN)/voxgate serve --host $(HOST) --port $(PORT)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
