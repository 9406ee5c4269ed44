#!/bin/bash
# TPC-H SF 1 lineitem (PAX) on an array of 2 isp-ch8 devices: Q1 and Q6 whole-process wall
# time (best of 3, `csd query --array arr --strategy hw-isp --threads 2`) in process, on
# 1 worker serving both devices, and on 2 workers (one device each); answers compared.
# Usage: scripts/dist/measure-q1q6.sh   (binary: $B, default csd on PATH)
set -uo pipefail
B=${B:-csd}
D=${D:-/tmp/csd-dist-q1q6}
export CSD_WORKER_TOKEN=csd-measure-token-0123456789
rm -rf "$D"; mkdir -p "$D"; cd "$D"
$B array create --devices 2 --preset isp-ch8 --dir arr > /dev/null
/usr/bin/time -v -o load.time $B load tpch --sf 1 --tables lineitem --layout pax --array arr > load.out 2>&1
echo "load: $(grep Elapsed load.time | awk '{print $NF}') wall, $(grep 'Maximum resident' load.time | awk '{print $NF}') kB peak RSS"
best() { # label query extra...: best wall of 3 runs, rows of the last
  local label=$1 q=$2; shift 2; local b=999
  for i in 1 2 3; do
    /usr/bin/time -f %e -o t.out $B query --array arr --strategy hw-isp --threads 2 --json "$@" $q > $label-$q.json 2> $label-$q.err || { echo "$label $q failed: $(tail -2 $label-$q.err)"; return; }
    t=$(tail -1 t.out); b=$(python3 -c "print(min($b,$t))")
  done
  echo -e "$label\t$q\t$b s\t$(python3 -c "import json;print(json.load(open('$label-$q.json'))['rows'])" | cut -c1-60)"
}
workers() { # lines "name devices port"
  local list=""
  while read n devs port; do
    $B worker --array arr --devices $devs --listen 127.0.0.1:$port --threads 2 > $n.out 2> $n.err &
    echo $! > $n.pid
    for i in $(seq 1 300); do grep -q listening $n.out 2>/dev/null && break; sleep 0.2; done
  done
}
place() { sed -i "s|^version = \(.*\)$|version = \1\nworkers = [$1]|" arr/csd-array.toml; }
stop() { for n in "$@"; do kill $(cat $n.pid); done; sleep 1; sed -i '/^workers = \[/d' arr/csd-array.toml; }
for q in q1 q6; do best inproc $q --in-process; done
echo "w1 dev0.img,dev1.img 50081" | workers
place '"http://127.0.0.1:50081", "http://127.0.0.1:50081"'
for q in q1 q6; do best one $q; done
stop w1
printf "w1 dev0.img 50081\nw2 dev1.img 50082\n" | workers
place '"http://127.0.0.1:50081", "http://127.0.0.1:50082"'
for q in q1 q6; do best two $q; done
stop w1 w2
for q in q1 q6; do
  python3 -c "
import json
r=[json.load(open(f'{l}-$q.json'))['rows'] for l in ('inproc','one','two')]
print('$q answers', 'equal' if r[0]==r[1]==r[2] else 'DIFFER')"
done
