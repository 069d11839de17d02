# `make test` and `make demo` work on a fresh machine: they build .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.voxgate-installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup test demo lint browser-deps teacher-deps teacher-debs zonos-deps reference-deps clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The pinned CPU torch goes in first: afterwards the project's bounded `torch` requirement is
# already met, so pip never pulls a multi-GB CUDA build onto a CPU machine.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,ray]'
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

# eSpeak NG, the phonemizer Zonos reads its text through (models/zonos/phonemes.py; the
# `phonemizer` package finds its library). Without it the Zonos tests are skipped.
zonos-deps:
	@if ! command -v espeak-ng >/dev/null; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null) \
				|| echo "warning: could not install espeak-ng; the Zonos tests will be skipped"; \
		else echo "note: espeak-ng missing (apt-get install espeak-ng); the Zonos tests will be skipped"; fi; \
	fi

# The teacher as .deb files, for machines without a registry (training/README.md): unpacked
# there with dpkg -x. Carried to the GPU machine as `.teacher` (git-ignored).
teacher-debs:
	apt-get update -qq || true
	mkdir -p .teacher && cd .teacher && apt-get download flite libflite1 libasound2 libasound2-data wamerican

# The official Chatterbox package, the independent reference of the flow + HiFT parity tests
# (tests/models/official_chatterbox.py), in the git-ignored .ref/ folder. --no-deps: the
# venv's pinned torch, numpy and transformers stay as they are; beside the package come only
# the modules its S3Gen flow and vocoder import that the venv lacks, and the S3 tokenizer
# package its speech tokenizer subclasses.
REFERENCE_DIR := .ref
REFERENCE_PKGS := chatterbox-tts==0.1.7 diffusers==0.29.0 conformer==0.3.2 omegaconf==2.3.0 s3tokenizer==0.3.0 \
	antlr4-python3-runtime==4.9.3 scipy importlib_metadata zipp
# The stamp names the list's version: a new package re-runs the install on a kept .ref/.
REFERENCE_STAMP := $(REFERENCE_DIR)/.installed-2
$(REFERENCE_STAMP): $(BIN)/python
	$(BIN)/pip install -q --no-deps --target $(REFERENCE_DIR) $(REFERENCE_PKGS) \
		|| echo "warning: could not install the chatterbox-tts reference; its parity tests will be skipped"
	@if [ -d $(REFERENCE_DIR)/chatterbox ]; then touch $@; fi

# The official Zonos code (tests/models/official_zonos.py) from GitHub at a pinned commit: the
# `zonos` name on PyPI is an empty placeholder. Its source folder is copied as it is: a pip
# install of that commit leaves out the `zonos.backbone` subpackage (its setuptools config
# includes only the top-level package), which the parity tests need.
ZONOS_REF := https://github.com/Zyphra/Zonos
ZONOS_COMMIT := bc40d98e1e1ab54fc65c483be127a90e3c7c0645
$(REFERENCE_DIR)/.zonos-installed-2:
	@rm -rf $(REFERENCE_DIR)/zonos $(REFERENCE_DIR)/zonos_src && mkdir -p $(REFERENCE_DIR)/zonos_src
	cd $(REFERENCE_DIR)/zonos_src && git init -q && git remote add origin $(ZONOS_REF) \
		&& git fetch -q --depth 1 origin $(ZONOS_COMMIT) && git checkout -q FETCH_HEAD \
		&& cp -r zonos .. \
		|| echo "warning: could not fetch the official Zonos code; its parity tests will be skipped"
	@if [ -f $(REFERENCE_DIR)/zonos/backbone/_torch.py ]; then touch $@; fi

# The official Qwen3-TTS package (tests/models/official_qwen3_tts.py), also --no-deps. It is
# written for transformers 4.57, so that version and the huggingface-hub and tokenizers it
# accepts go into $(REFERENCE_DIR)/tf457, which only the reference's own subprocess puts on
# its path; einops is the one other module it imports that the venv lacks.
QWEN3_TTS_REFERENCE_PKGS := qwen-tts==0.1.1 einops==0.8.1
QWEN3_TTS_TRANSFORMERS := transformers==4.57.3 huggingface_hub==0.36.0 tokenizers==0.22.1
$(REFERENCE_DIR)/.installed-qwen3-tts: $(BIN)/python
	$(BIN)/pip install -q --no-deps --target $(REFERENCE_DIR) $(QWEN3_TTS_REFERENCE_PKGS) \
		&& $(BIN)/pip install -q --no-deps --target $(REFERENCE_DIR)/tf457 $(QWEN3_TTS_TRANSFORMERS) \
		|| echo "warning: could not install the qwen-tts reference; its parity tests will be skipped"
	@if [ -d $(REFERENCE_DIR)/qwen_tts ] && [ -d $(REFERENCE_DIR)/tf457/transformers ]; then touch $@; fi

# StepFun's Step-Audio2 code (tests/models/official_step_audio2.py): the flow + DiT modules of
# Step-Audio 2's token2wav. Not a pip package, so a shallow clone at a pinned commit; its one
# import the venv lacks, einops, comes with the qwen-tts reference above.
STEP_AUDIO2_REF := https://github.com/stepfun-ai/Step-Audio2
STEP_AUDIO2_COMMIT := 3556c4ce46eb05f7ff20374bd6359c8dd0aef6cf
$(REFERENCE_DIR)/.installed-step-audio2:
	@rm -rf $(REFERENCE_DIR)/step_audio2 && mkdir -p $(REFERENCE_DIR)/step_audio2
	cd $(REFERENCE_DIR)/step_audio2 && git init -q && git remote add origin $(STEP_AUDIO2_REF) \
		&& git fetch -q --depth 1 origin $(STEP_AUDIO2_COMMIT) && git checkout -q FETCH_HEAD \
		|| echo "warning: could not fetch the Step-Audio2 code; its parity tests will be skipped"
	@if [ -d $(REFERENCE_DIR)/step_audio2/cosyvoice2 ]; then touch $@; fi

# Triton, for its interpreter: tests/models/test_snac_triton.py runs SNAC's Triton kernels
# (models/codecs/snac_triton.py, CUDA in serving) on the CPU. In a folder of its own, which only
# that test's subprocess puts on its path: the CPU torch never sees it. Not named `triton`: the
# other references' subprocesses put .ref on their path, where a `triton` folder would import
# as a namespace package and break their transformers' imports.
TRITON_REF := triton==3.6.0
$(REFERENCE_DIR)/.installed-triton-interpreter: $(BIN)/python
	$(BIN)/pip install -q --no-deps --target $(REFERENCE_DIR)/triton-interpreter $(TRITON_REF) \
		|| echo "warning: could not install Triton; the SNAC kernels' CPU test will be skipped"
	@if [ -d $(REFERENCE_DIR)/triton-interpreter/triton ]; then touch $@; fi

reference-deps: $(REFERENCE_STAMP) $(REFERENCE_DIR)/.zonos-installed-2 \
	$(REFERENCE_DIR)/.installed-qwen3-tts $(REFERENCE_DIR)/.installed-step-audio2 \
	$(REFERENCE_DIR)/.installed-triton-interpreter

# The suite runs in TEST_WORKERS processes (pytest-xdist), a whole test file to each, so a
# file's module-scoped servers and models are built once. One process kept about one of the CI
# machine's two cores busy (pytest 20:15); two finished the same tests in 12:53 on this 2-core
# machine. TEST_WORKERS=0 runs it in this process (one test's output, a debugger).
TEST_WORKERS ?= 2
test: lint browser-deps teacher-deps zonos-deps reference-deps
	$(BIN)/python -m pytest -q -m "not gpu" -n $(TEST_WORKERS) --dist loadfile \
		--durations=30 --durations-min=10 tests

lint: setup
	$(BIN)/ruff check gateway engine models training voxbench voxgate tests bench
	$(BIN)/ruff format --check gateway engine models training voxbench voxgate tests bench

demo: setup
	@echo "Voxgate demo: open http://$(HOST):$(PORT)/ in a browser once the model has loaded."
	$(BIN)/voxgate serve --host $(HOST) --port $(PORT)

clean:
	rm -rf $(VENV) $(REFERENCE_DIR) .pytest_cache .ruff_cache
