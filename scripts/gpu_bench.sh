#!/usr/bin/env bash
# The GPU half of the serving benchmarks (issue 27), as one prepared command for a lent GPU machine (the
# `device` tool; see docs/models.md "On a GPU"). That machine has torch + transformers but no network and no
# web stack: the wheels travel in .whl (cp312 manylinux: `bash scripts/gpu_wheels.sh` fetches them), the SmolLM2 config and
# tokenizer in .gpu_assets (`python benchmarks/gpu_check.py --prepare .gpu_assets`); the weights are random
# (same architecture, so the same compute per pass as the bundled model).
#   1. benchmarks/gpu_check.py: the model's passes alone (two-pass vs one-pass vs CUDA graphs vs batched);
#   2. a real `dpicl serve` on cuda/bf16 with the random-init full-size SmolLM2, and benchmarks/bench_serving.py
#      against it: rnm 8x4 and 2x1, 1 / 16 / 64 clients.
set -uo pipefail
: "${OUT:=/tmp/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
# APP_ROOT: another checkout's tree whose `app` the server runs (an A/B in one device call); default this one
export PYTHONPATH=/tmp/site:${APP_ROOT:-$PWD}:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if [ "${SKIP_GPU_CHECK:-0}" != 1 ]; then
  echo "== gpu_check"; date
  timeout "${GPU_CHECK_TIMEOUT:-240}" python3 benchmarks/gpu_check.py --assets .gpu_assets --out "$OUT/gpu_check.json" \
    > "$OUT/gpu_check.log" 2>&1
  echo "gpu_check rc=$?"; tail -5 "$OUT/gpu_check.log"
fi

echo "== random-init SmolLM2 folder"; date
python3 - <<'PY' > "$OUT/rand.log" 2>&1 || { tail -20 "$OUT/rand.log"; exit 1; }
import pathlib, shutil
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, dst = pathlib.Path(".gpu_assets"), pathlib.Path("/tmp/rand-smollm2")
dst.mkdir(exist_ok=True)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(src)), dtype=torch.bfloat16)
model.save_pretrained(str(dst))
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, dst / f.name)
print("saved", sorted(p.name for p in dst.iterdir()))
PY

echo "== dpicl serve (cuda, bf16)"; date
export DPICL_DATABASE_URL=sqlite:///$OUT/gpu-bench.db DPICL_DEVICE=cuda DPICL_DTYPE=bfloat16 DPICL_PORT=8123 \
  DPICL_LOG_LEVEL=info DPICL_MODELS='[{"name": "smollm2-135m-instruct", "kind": "lm", "source": "/tmp/rand-smollm2", "backend": "hf"}]'
(cd "${APP_ROOT:-$PWD}" && exec python3 -m app.cli serve) > "$OUT/serve.log" 2>&1 &
SERVER=$!
python3 - <<'PY'
import time, httpx
for _ in range(240):
    try:
        if httpx.get("http://127.0.0.1:8123/v1/health", timeout=2).status_code == 200:
            print("server ready"); break
    except httpx.HTTPError:
        pass
    time.sleep(1)
else:
    print("server NOT ready")
PY
date
timeout "${SERVING_TIMEOUT:-300}" python3 benchmarks/bench_serving.py --url http://127.0.0.1:8123 \
  --workloads "${WORKLOADS:-rnm 8x4,rnm 2x1}" --large-clients "${CLIENTS:-1,16,64}" --clients "${CLIENTS:-1,16,64}" \
  --answers "${ANSWERS:-64}" --rounds "${ROUNDS:-2}" --out "$OUT/serving.json" > "$OUT/serving.log" 2>&1
echo "bench_serving rc=$?"; tail -40 "$OUT/serving.log"
kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
rm -f "$OUT"/gpu-bench.db*
grep -i -E "graph|bucket|budget|warm" "$OUT/serve.log" | tail -15
date
