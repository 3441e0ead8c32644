#!/usr/bin/env bash
# preflight-ab.sh OLD NEW [N]: the whole `gorun preflight` process on this
# machine, two revisions side by side (alternating runs, same load), N
# rounds (default 10). Prints each run, then min/median per revision and
# the ratio of medians NEW/OLD.
set -euo pipefail
old=$1 new=$2 n=${3:-10}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for rev in "$old" "$new"; do
  mkdir -p "$tmp/$rev"
  git -C "$root" archive "$rev" | tar -x -C "$tmp/$rev"
  (cd "$tmp/$rev" && go build -o "$tmp/gorun-$rev" .)
done
echo "print('hi')" > "$tmp/train.py"
uptime
for i in $(seq "$n"); do
  for rev in "$old" "$new"; do
    s=$(date +%s%N)
    "$tmp/gorun-$rev" preflight --nproc-per-node 2 "$tmp/train.py" >/dev/null 2>&1 || true
    e=$(date +%s%N)
    echo "$rev $(( (e - s) / 1000 ))"
  done
done | tee "$tmp/runs"
uptime
for rev in "$old" "$new"; do
  grep "^$rev " "$tmp/runs" | awk '{print $2}' | sort -n > "$tmp/$rev.sorted"
  echo "$rev min $(head -1 "$tmp/$rev.sorted") us median $(sed -n "$(( (n + 1) / 2 ))p" "$tmp/$rev.sorted") us"
done
mo=$(sed -n "$(( (n + 1) / 2 ))p" "$tmp/$old.sorted"); mn=$(sed -n "$(( (n + 1) / 2 ))p" "$tmp/$new.sorted")
awk -v a="$mo" -v b="$mn" 'BEGIN { printf "ratio of medians new/old: %.2f\n", b / a }'
