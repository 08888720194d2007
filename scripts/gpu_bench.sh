#!/usr/bin/env bash
# The GPU half of the serving benchmarks (issue 27), as one prepared command for a lent GPU machine (the
# `device` tool; see docs/models.md "On a GPU"). That machine has torch + transformers but no network and no
# web stack: the wheels travel in .whl (cp312 manylinux: `bash scripts/gpu_wheels.sh` fetches them), the SmolLM2 config and
# tokenizer in .gpu_assets (`python benchmarks/gpu_check.py --prepare .gpu_assets`); the weights are random
# (same architecture, so the same compute per pass as the bundled model).
#   1. benchmarks/gpu_check.py: the model's passes alone (two-pass vs one-pass vs CUDA graphs vs batched);
#   2. a real `dpicl serve` on cuda/bf16 with the random-init full-size SmolLM2, and benchmarks/bench_serving.py
#      against it: rnm 8x4 and 2x1, 1 / 16 / 64 clients (REPLICAS=N: N servers on the one GPU and database).
# Knobs (environment): SKIP_GPU_CHECK, GPU_CHECK_ARGS, GPU_CHECK_TIMEOUT, APP_ROOT (another tree's app, for an
# A/B), REPLICAS, WORKLOADS, CLIENTS, ANSWERS, ROUNDS, SERVING_TIMEOUT, OUT, DEVICE (cpu: a dry run of the script here),
# DB (sqlite, the default, or pg: a PostgreSQL 16 server started from the carried pgserver wheel, for the
# replicas' ledger on row locks instead of SQLite's one write lock).
set -uo pipefail
: "${OUT:=/tmp/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ "${DEVICE:-cuda}" != cpu ]; then  # a dry run here uses this machine's venv instead
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
fi
# APP_ROOT: another checkout's tree whose `app` the server runs (an A/B in one device call); default this one
export PYTHONPATH=/tmp/site:${APP_ROOT:-$PWD}:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if [ "${SKIP_GPU_CHECK:-0}" != 1 ]; then
  echo "== gpu_check"; date
  # GPU_CHECK_ARGS: e.g. --compile (also times torch.compile(mode="reduce-overhead") buckets)
  timeout "${GPU_CHECK_TIMEOUT:-240}" python3 benchmarks/gpu_check.py --assets .gpu_assets --out "$OUT/gpu_check.json" ${GPU_CHECK_ARGS:-} \
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

DB_URL=sqlite:///$OUT/gpu-bench.db
if [ "${DB:-sqlite}" = pg ]; then
  echo "== PostgreSQL (pgserver)"; date
  # pgserver starts postgres on a unix socket in the data folder and leaves it running (cleanup_mode None)
  DB_URL=$(python3 - <<'PY' 2> "$OUT/pg.log"
import pgserver
srv = pgserver.get_server("/tmp/gpu-bench-pg", cleanup_mode=None)
srv.psql("DROP DATABASE IF EXISTS bench;")
srv.psql("CREATE DATABASE bench;")
print(srv.get_uri("bench"))
PY
) || { echo "PostgreSQL did not start"; tail -20 "$OUT/pg.log"; exit 1; }
  echo "database: $DB_URL"
fi
echo "== dpicl serve (${DEVICE:-cuda}, bf16) x ${REPLICAS:-1} on ${DB:-sqlite}"; date
export DPICL_DATABASE_URL=$DB_URL DPICL_DEVICE=${DEVICE:-cuda} DPICL_DTYPE=bfloat16 \
  DPICL_LOG_LEVEL=info DPICL_MODELS='[{"name": "smollm2-135m-instruct", "kind": "lm", "source": "/tmp/rand-smollm2", "backend": "hf"}]'
wait_ready() {  # $1: port
  python3 - "$1" <<'PY'
import sys, time, httpx
for _ in range(240):
    try:
        if httpx.get(f"http://127.0.0.1:{sys.argv[1]}/v1/health", timeout=2).status_code == 200:
            print("server ready on", sys.argv[1]); break
    except httpx.HTTPError:
        pass
    time.sleep(1)
else:
    print("server NOT ready on", sys.argv[1])
PY
}
# REPLICAS (default 1): servers on one GPU and one database (docs/deploy.md); the first migrates, the others
# start once it answers (each captures its own CUDA graphs); bench_serving spreads its clients over them.
SERVERS=(); URLS=""
for i in $(seq 0 $(( ${REPLICAS:-1} - 1 ))); do
  port=$((8123 + i))
  (cd "${APP_ROOT:-$PWD}" && DPICL_PORT=$port exec python3 -m app.cli serve) > "$OUT/serve$i.log" 2>&1 &
  SERVERS+=($!); URLS="${URLS:+$URLS,}http://127.0.0.1:$port"
  [ "$i" = 0 ] && wait_ready $port
done
for i in $(seq 1 $(( ${REPLICAS:-1} - 1 ))); do wait_ready $((8123 + i)); done
date
# GPU utilisation while the clients run (benchmarks/gpu_util.py lines it up with each run's wall time)
UTIL=""
if [ "${DEVICE:-cuda}" != cpu ]; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader -lms 100 > "$OUT/util.csv" 2>&1 &
  UTIL=$!
fi
timeout "${SERVING_TIMEOUT:-300}" python3 benchmarks/bench_serving.py --url "$URLS" \
  --workloads "${WORKLOADS:-rnm 8x4,rnm 2x1}" --large-clients "${CLIENTS:-1,16,64}" --clients "${CLIENTS:-1,16,64}" \
  --answers "${ANSWERS:-64}" --rounds "${ROUNDS:-2}" --out "$OUT/serving.json" > "$OUT/serving.log" 2>&1
echo "bench_serving rc=$?"; grep -E "over [0-9]+ rounds" "$OUT/serving.log"
if [ -n "$UTIL" ]; then
  kill "$UTIL" 2>/dev/null
  python3 benchmarks/gpu_util.py "$OUT/util.csv" "$OUT/serving.json" && rm -f "$OUT/util.csv"
fi
kill "${SERVERS[@]}" 2>/dev/null; wait "${SERVERS[@]}" 2>/dev/null
mv "$OUT/serve0.log" "$OUT/serve.log"; rm -f "$OUT"/serve[1-9]*.log
rm -f "$OUT"/gpu-bench.db*
grep -i -E "graph|bucket|budget|warm" "$OUT/serve.log" | tail -15
date
