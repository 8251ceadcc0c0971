#!/bin/bash
# One batched GPU session for gemm_tc (the `run` tool's machine): build only gemm_tc, its tests,
# the executable on every variant, compute-sanitizer on small ragged shapes, then (by flags) the
# bench and ncu. Logs go to $OUT; a short table is printed last.
#   cuda/gemm_tc/gpu_run.sh [test] [sanitize] [bench] [ncu] [sass]
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
want() { [[ " $* " == *" all "* ]] || [[ " $ARGS " == *" $1 "* ]]; }
ARGS="$*"
make -j16 build/lib/libgemm_tc.so build/bin/gemm_tc build/ptxas/gemm_tc.txt 2>&1 | tail -20 || exit 1
if want sass; then
  cuobjdump -sass build/lib/libgemm_tc.so > /tmp/sass.txt
  echo "SASS: HGMMA=$(grep -c HGMMA /tmp/sass.txt) HMMA=$(grep -c HMMA /tmp/sass.txt) UTMALDG=$(grep -c UTMALDG /tmp/sass.txt) LDSM=$(grep -c LDSM /tmp/sass.txt) LDL/STL=$(grep -cE "LDL|STL" /tmp/sass.txt)" | tee "$OUT/sass_counts.txt"
fi
# 03 first on its own, with a short timeout: a pipeline bug shows up as a hang, not a wrong answer.
for shape in "128 256 64" "200 136 72" "1000 520 1024"; do
  timeout 20 build/bin/gemm_tc --variant 03_wgmma --reps 2 $shape 2>&1 | tail -2; rc=$?; echo "03 smoke $shape rc=$rc"
  [ $rc -ne 0 ] && SMOKE_FAIL=1
done
if [ -n "$SMOKE_FAIL" ]; then echo "03 smoke failed: skipping bench and ncu"; ARGS=${ARGS//bench/}; ARGS=${ARGS//ncu/}; fi
if want test; then
  timeout 200 python3 -m pytest tests/test_gemm_tc.py -x -q -p no:cacheprovider --timeout 60 2>&1 | tee "$OUT/pytest.txt" | tail -15
fi
for s in 4096; do
  timeout 120 build/bin/gemm_tc --variant all --reps 10 $s $s $s 2>&1 | tee -a "$OUT/exe.txt"
done
if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    for v in 01_wmma 02_mma_sync 03_wgmma; do
      r=$(timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 build/bin/gemm_tc --variant $v --reps 1 200 136 72 2>&1 | tail -2 | tr '\n' ' ')
      echo "sanitize $tool $v rc=$? :: ${r:0:160}" | tee -a "$OUT/sanitize.txt"
    done
  done
  r=$(timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 build/bin/gemm_tc --variant 02_mma_sync --reps 1 67 33 131 2>&1 | tail -1)
  echo "sanitize memcheck 02_unaligned :: $r" | tee -a "$OUT/sanitize.txt"
fi
if want bench; then
  timeout 200 python3 - <<'PY' 2>&1 | tee "$OUT/bench.txt" | tail -40
import os, pandas as pd
from harness import bench
df, ceil = bench.run(["gemm_tc"])
meta = bench.metadata()
path = bench.write_csv(df, meta, ceil, dest=__import__("pathlib").Path(os.environ.get("OUT", "/tmp")) / "bench-gemm_tc.csv")
pd.set_option("display.width", 200)
for c in ceil.values(): print("ceiling", c.name, round(c.value, 1), c.unit, c.detail)
print(df[["variant", "size", "median_ms", "value", "ceiling", "ratio", "target"]].to_string())
PY
fi
if want ncu; then
  M="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
  for v in 01_wmma 02_mma_sync 03_wgmma; do
    timeout 100 ncu --clock-control none --csv --page raw --print-units base --metrics $M -k regex:k0 -c 1 build/bin/gemm_tc --variant $v --reps 1 4096 4096 4096 > "/tmp/ncu_$v.csv" 2>&1
    echo "ncu $v rc=$?"
  done
  python3 - <<'PY' 2>&1 | tee "$OUT/ncu_summary.txt"
import csv, glob, io, os
for f in sorted(glob.glob("/tmp/ncu_*.csv")):
    text = open(f).read(); i = text.find('"ID"')
    if i < 0: print(f, "no ncu table:", text[-300:]); continue
    rows = list(csv.DictReader(io.StringIO(text[i:])))
    keep = ("gpu__time_duration.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__inst_executed_pipe_tensor_op_gmma.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread", "launch__occupancy_limit_registers")
    for r in rows[1:2]:
        print(os.path.basename(f), {k.split("__", 1)[-1][:40]: r.get(k) for k in keep if k in r})
PY
fi
