#!/usr/bin/env bash
# The ladder's device session in one command (issue 10): build only matmul, then the stages named
# in argv, logs under $OUT (default build/device). Stages:
#   check     the executable's one table at 4096³, the matmul/tune/ladder tests, compute-sanitizer
#             (memcheck, racecheck, synccheck) on every rung at two small shapes
#   tune      invoke tune matmul (4096³), the JSON copied to $OUT
#   bench     invoke bench --programs matmul, the CSV copied to $OUT
#   ncu       one profile per rung (and cuBLAS) at 4096³: FMA pipe, bank conflicts, L2/DRAM throughput
#   sancfg    compute-sanitizer memcheck + racecheck on every ladder configuration (--config), two shapes
# Usage: cuda/matmul/device_run.sh check tune bench ncu
set -u
OUT=${OUT:-build/device}
mkdir -p "$OUT"
RUNGS="04_blocktile_1d 05_blocktile_2d 06_vectorized 07_warptile 08_pipelined 09_tuned"
step() { echo "=== $* ($(date +%T))"; }

step build
make -j16 build/lib/libmatmul.so build/bin/matmul build/ptxas/matmul.txt build/lib/libdevice_info.so 2>&1 | grep -v "^  NVCC\|^  LINK" | tail -20

for stage in "$@"; do
  case $stage in
  check)
    step "executable, all variants, 4096^3"
    timeout 120 build/bin/matmul --variant all 4096 4096 4096 2>&1 | tee "$OUT/all4096.txt" | grep -v "^result"
    step "executable refuses 100000^3"
    build/bin/matmul 100000 100000 100000; echo "status $?"
    step pytest
    timeout 150 python3 -m pytest tests/test_matmul.py tests/test_tune.py tests/test_ladder_plot.py -x -q -n 8 \
      -p no:cacheprovider 2>&1 | tail -4
    step "compute-sanitizer"
    for v in $RUNGS; do for shape in "65 33 47" "129 68 36"; do for tool in memcheck racecheck synccheck; do
      echo "$tool $v $shape"; done; done; done |
      xargs -P 8 -L 1 sh -c 'compute-sanitizer --tool $0 --error-exitcode 9 build/bin/matmul --variant $1 --reps 1 $2 $3 $4 \
        > /tmp/san-$0-$1-$2.log 2>&1; echo "$0 $1 $2x$3x$4 status=$? $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/san-$0-$1-$2.log | head -1)"' |
      sort > /tmp/sanitize.txt; grep -v "status=0" /tmp/sanitize.txt; echo "sanitizer runs: $(wc -l < /tmp/sanitize.txt), not clean: $(grep -vc "status=0" /tmp/sanitize.txt)"
    ;;
  sancfg)
    step "compute-sanitizer on every configuration"
    PYTHONPATH=$PYTHONPATH python3 -c "from harness.programs import matmul as mm; print('\n'.join(mm.configs()))" |
      while read c; do for shape in "65 33 47" "129 68 36"; do for tool in memcheck racecheck; do echo "$tool $c $shape"; done; done; done |
      xargs -P 8 -L 1 sh -c 'compute-sanitizer --tool $0 --error-exitcode 9 build/bin/matmul --config $1 --reps 1 $2 $3 $4 \
        > /tmp/sanc-$0-$1-$2.log 2>&1; echo "$0 $1 $2x$3x$4 status=$? $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|^error" /tmp/sanc-$0-$1-$2.log | head -1)"' |
      sort > /tmp/sancfg.txt; grep -v "status=0" /tmp/sancfg.txt; echo "config sanitizer runs: $(wc -l < /tmp/sancfg.txt), not clean: $(grep -vc "status=0" /tmp/sancfg.txt)"
    ;;
  tune)
    step "invoke tune matmul"
    timeout 120 python3 -m invoke tune matmul 2>&1 | tail -25
    cp bench/results/*/matmul-tune.json "$OUT/" 2>/dev/null
    ;;
  bench)
    step "invoke bench --programs matmul"
    timeout 200 python3 -m invoke bench --programs matmul > "$OUT/bench.txt" 2>&1; echo "status $?"
    cp "$(ls -t build/bench/*.csv | head -1)" "$OUT/" 2>/dev/null
    python3 - "$OUT" <<'EOF'
import glob, sys, pandas as pd
p = sorted(glob.glob(sys.argv[1] + "/bench-*.csv"))[-1]
df = pd.read_csv(p)
d = df[(df.program == "matmul") & df.ceiling.astype(str).str.startswith("cublas")]
t = d.pivot_table(index="variant", columns="size", values="ratio", sort=False)
v = d.pivot_table(index="variant", columns="size", values="value", sort=False)
print((v.round(1).astype(str) + " (" + t.round(3).astype(str) + ")").to_string())
print(df[df.program == "ceiling"][["variant", "size", "value"]].to_string())
EOF
    ;;
  ncu)
    step ncu
    M=sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,lts__t_bytes.sum.per_second,dram__bytes.sum.per_second,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio
    for v in ${NCU_RUNGS:-$RUNGS cublas}; do
      re="regex:sgemm_0"; [ $v = cublas ] && re="regex:gemm|Kernel"
      timeout 60 ncu --clock-control none --kernel-name "$re" --launch-count 1 --csv --page raw --print-units base \
        --section WarpStateStats --metrics $M build/bin/matmul --variant $v --reps 1 4096 4096 4096 > "/tmp/ncu-$v.csv" 2>&1
      echo "ncu $v status $?"
    done
    tar czf "$OUT/ncu.tgz" -C /tmp $(cd /tmp && ls ncu-*.csv)
    python3 - /tmp <<'EOF'
import csv, glob, io, sys
rows = []
for p in sorted(glob.glob(sys.argv[1] + "/ncu-*.csv")):
    text = open(p).read()
    i = text.find('"ID"')
    if i < 0:
        print(p, "no table:", text[-300:]); continue
    r = list(csv.DictReader(io.StringIO(text[i:])))
    r = [x for x in r if x.get("ID", "").isdigit()]
    if not r:
        continue
    x = r[0]
    def g(k):
        try: return float(x[k].replace(",", ""))
        except Exception: return float("nan")
    rows.append((p.split("ncu-")[1][:-4], x["Kernel Name"][:38], g("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
                 g("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"), g("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
                 g("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"), g("lts__t_bytes.sum.per_second") / 1e9,
                 g("dram__bytes.sum.per_second") / 1e9, g("sm__warps_active.avg.pct_of_peak_sustained_active"), g("gpu__time_duration.sum") / 1e6))
    stalls = sorted(((g(key), key.split("issue_stalled_")[1].split("_per")[0]) for key in x
                     if "average_warps_issue_stalled" in key and key.endswith("per_issue_active.ratio")), reverse=True)[:4]
    rows[-1] = rows[-1] + (" ".join(f"{n}={v:.2f}" for v, n in stalls),)
print(f"{'variant':16} {'kernel':38} {'fma%':>6} {'confl_ld':>10} {'confl_st':>10} {'wavef_ld':>11} {'L2GB/s':>8} {'DRAMGB/s':>8} {'warps%':>6} {'ms':>7}")
for r in rows:
    print(f"{r[0]:16} {r[1]:38} {r[2]:6.1f} {r[3]:10.0f} {r[4]:10.0f} {r[5]:11.0f} {r[6]:8.0f} {r[7]:8.0f} {r[8]:6.1f} {r[9]:7.3f}")
for r in rows:
    print(f"stalls per issue {r[0]:16} {r[10]}")
EOF
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
step done
