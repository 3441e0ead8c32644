#!/usr/bin/env bash
# The fidelity suite (docs/compatibility.md, "What a pooled worker guarantees") on one
# machine, with real torchrun, as examples/fidelity_test.go runs it in CI:
# the probe under torchrun and under gorun (pooled, cold, a restarted
# attempt), on NPROC ranks and on one (an NCCL all_reduce where there is a
# GPU per rank, gloo otherwise), and each case of examples/fidelity/cases.
# Every comparison's output, and a summary line per run, to OUTDIR.
#   usage: GORUN=path [OUTDIR=dir] [NPROC=2] [CASES="probe seeds args ..."] [TORCHRUN=torchrun] [PYTHON=python3]
# CASES: those alone ("probe": the probe's pooled and cold runs; "restart": a
# restarted attempt; "probe1": one rank; a case's name: that case).
#          docs/bench/fidelity-device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
gorun=$(realpath "${GORUN:?set GORUN to the gorun binary}")
torchrun=$(command -v "${TORCHRUN:-torchrun}") python=$(command -v "${PYTHON:-python3}")
nproc=${NPROC:-2}
out=${OUTDIR:-$(mktemp -d /tmp/gorun-fidelity-XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d /tmp/gorun-fidelity-work-XXXXXX)
export PYTHON_EXEC=$python NO_COLOR=1 PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$work/cache
export FIDELITY_CASES=$root/examples/fidelity/cases
fails=0
summary=$out/summary.txt
echo "== fidelity-device.sh: $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null), $(nproc) CPUs, $("$python" -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count(), "python", sys.version.split()[0])' 2>&1)" | tee "$summary"
port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# run NAME DIR LAUNCHER ARGS...: LAUNCHER is torchrun, or gorun with its options
run() {
  local name=$1 dir=$2
  shift 2
  mkdir -p "$work/$name"
  (cd "$dir" && FIDELITY_OUT=$work/$name timeout 300 "$@" >"$out/$name.log" 2>&1)
  echo "$name rc=$?" >>"$summary"
}
# compare BASE RUN LABEL
compare() {
  local f=$out/compare-$2-$3.txt
  "$python" "$root/examples/fidelity/compare.py" "$work/$1" "$work/$2" --label "$3" --readme "$root/docs/compatibility.md" >"$f" 2>&1
  local rc=$?
  tail -1 "$f" | sed "s/^/$2: /" | tee -a "$summary"
  grep DIFFERS "$f" | head -20 | tee -a "$summary"
  [ $rc = 0 ] || fails=$((fails + 1))
}
cold() { # RUN: did gorun start it cold? (the line, or "pooled")
  local l
  l=$(grep -m1 "without the worker pool" "$out/$1.log") || l="pooled"
  echo "$1: $l" | tee -a "$summary"
}
probe=$root/examples/fidelity/probe.py
T=("$torchrun" --master_port) G=("$gorun" --torchrun "$torchrun" --prewarm torch --master_port)
all="probe restart probe1 seeds omp_before_import syspath_before_import warnings_before_import atexit_before_import asdir zip module args runtime_var syntax_error raises"
want=" ${CASES:-$all} "
if [[ $want == *" probe "* ]]; then # NPROC ranks: pooled, cold, and the pool alone
run torchrun "$root" "${T[@]}" "$(port)" --nproc_per_node="$nproc" "$probe" a "b c"
run pooled "$root" "${G[@]}" "$(port)" --nproc_per_node="$nproc" "$probe" a "b c"
cold pooled
compare torchrun pooled pooled
run cold "$root" "$gorun" --torchrun "$torchrun" --prewarm off --master_port "$(port)" --nproc_per_node="$nproc" "$probe" a "b c"
compare torchrun cold cold
compare cold pooled pool # what the pool alone changes
fi
if [[ $want == *" restart "* ]]; then # a restarted attempt, from the warm standby's pool
FIDELITY_CRASH_ATTEMPT=0 run torchrun-restart "$root" "${T[@]}" "$(port)" --max_restarts=1 --nproc_per_node="$nproc" "$probe" a "b c"
FIDELITY_CRASH_ATTEMPT=0 run restart "$root" "${G[@]}" "$(port)" --max-restarts 1 --nproc_per_node="$nproc" "$probe" a "b c"
grep -h "restart after attempt" "$out/restart.log" | tee -a "$summary"
compare torchrun-restart restart restart
fi
if [[ $want == *" probe1 "* ]]; then # one rank: NCCL where there is a GPU
run torchrun-1 "$root" "${T[@]}" "$(port)" --nproc_per_node=1 "$probe"
run pooled-1 "$root" "${G[@]}" "$(port)" --nproc_per_node=1 "$probe"
cold pooled-1
compare torchrun-1 pooled-1 pooled
fi
c=$root/examples/fidelity/cases
"$python" -c "import zipfile; z=zipfile.ZipFile('$work/asdir.zip','w'); z.write('$c/asdir/__main__.py','__main__.py'); z.close()"
many=()
for i in $(seq 0 29999); do many+=("arg$i"); done
for case in $want; do
  case $case in probe | restart | probe1 | syntax_error | raises) continue ;; esac
  a=("$case.py")
  case $case in
  asdir) a=(asdir x) ;;
  zip) a=("$work/asdir.zip" x) ;;
  module) a=(-m args x) ;;
  args) a=(args.py "${many[@]}") ;;
  esac
  if [ $case = runtime_var ]; then # a first run learns it, the second starts cold
    run "first-$case" "$c" "${G[@]}" "$(port)" --nproc_per_node="$nproc" "${a[@]}"
    grep -m1 "gorun: this worker's interpreter" "$out/first-$case.log" | tee -a "$summary"
  fi
  run "torchrun-$case" "$c" "${T[@]}" "$(port)" --nproc_per_node="$nproc" "${a[@]}"
  run "$case" "$c" "${G[@]}" "$(port)" --nproc_per_node="$nproc" "${a[@]}"
  cold "$case"
  compare "torchrun-$case" "$case" case
done
for case in syntax_error raises; do
  [[ $want == *" $case "* ]] || continue
  run "$case" "$c" "${G[@]}" "$(port)" --nproc_per_node="$nproc" "$case.py"
  grep -c 'File ".*warm' "$out/$case.log" | sed "s/^/$case: frames of gorun's: /" | tee -a "$summary"
  grep -m2 -A1 "Traceback\|SyntaxError" "$out/$case.log" | head -3 | tee -a "$summary"
done
mkdir -p "$out/ranks" && for d in "$work"/*/; do for f in "$d"rank*.json; do [ -e "$f" ] && cp "$f" "$out/ranks/$(basename "$d")-$(basename "$f")"; done; done
echo "fidelity-device.sh: $fails comparisons with differences outside the allowlist" | tee -a "$summary"
rm -rf "$work"
[ $fails = 0 ]
