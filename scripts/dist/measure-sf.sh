#!/bin/bash
# SF N over 4 isp-ch8 devices on 2 workers: load through the workers, the 22 TPC-H
# queries distributed (workers up), then the workers stopped and the same 22 queries
# in process (answers compared), wall times, peak RSS per process, and the workers'
# resident set split (RssAnon / RssFile, sampled every second from /proc/PID/status).
# Usage: SF=10 scripts/dist/measure-sf.sh   (binary: $B, default csd on PATH)
set -uo pipefail
B=${B:-csd}
SF=${SF:-10}
D=${D:-/tmp/csd-dist-sf$SF}
export CSD_WORKER_TOKEN=csd-measure-token-0123456789
rm -rf "$D"; mkdir -p "$D"
cd "$D"
echo "start $(date -u +%T)"
$B array create --devices 4 --preset isp-ch8 --dir arr > create.out
start_worker() { # name devices port
  /usr/bin/time -v -o "$1.time" nice -n 10 $B worker --array arr --devices "$2" --listen 127.0.0.1:$3 --threads 2 > "$1.out" 2> "$1.err" &
  echo $! > "$1.tpid"
}
sample() { # name pid: max VmRSS, RssAnon, RssFile in kB, once a second
  local n=$1 p=$2 mr=0 ma=0 mf=0
  while [ -r /proc/$p/status ]; do
    read r a f < <(awk '/^VmRSS/{r=$2}/^RssAnon/{a=$2}/^RssFile/{f=$2}END{print r+0, a+0, f+0}' /proc/$p/status 2>/dev/null)
    [ "${r:-0}" -gt $mr ] && mr=$r; [ "${a:-0}" -gt $ma ] && ma=$a; [ "${f:-0}" -gt $mf ] && mf=$f
    echo "$mr $ma $mf" > $n.rss
    sleep 1
  done
}
start_worker w0 dev0.img,dev1.img 50071
start_worker w1 dev2.img,dev3.img 50072
for w in w0 w1; do
  for i in $(seq 1 600); do grep -q listening $w.out 2>/dev/null && break; sleep 0.2; done
  cat $w.out
  pgrep -P $(cat $w.tpid) > $w.pid
  sample $w $(cat $w.pid) &
done
sed -i 's|^version = \(.*\)$|version = \1\nworkers = ["http://127.0.0.1:50071", "http://127.0.0.1:50071", "http://127.0.0.1:50072", "http://127.0.0.1:50072"]|' arr/csd-array.toml
grep -n workers arr/csd-array.toml
t0=$(date +%s.%N)
/usr/bin/time -v -o load.time nice -n 10 $B load tpch --sf $SF --layout pax --array arr --json > load.json 2> load.err
echo "load rc=$? wall $(echo "$(date +%s.%N) - $t0" | bc) s"
tail -3 load.err
grep -E "Elapsed|Maximum resident" load.time
for w in w0 w1; do echo "$w after load (max kB VmRSS RssAnon RssFile): $(cat $w.rss)"; done
du -sh arr
: > q.tsv
td=0
for q in $(seq 1 22); do
  /usr/bin/time -v -o d$q.time nice -n 10 $B query --array arr --strategy hw-isp --threads 2 --json q$q > d$q.json 2> d$q.err; rd=$?
  wd=$(grep Elapsed d$q.time | awk '{print $NF}'); md=$(grep "Maximum resident" d$q.time | awk '{print $NF}')
  echo -e "d q$q\trc=$rd\t$wd\t${md} kB" | tee -a q.tsv
done
for w in w0 w1; do echo "$w after queries (max kB VmRSS RssAnon RssFile): $(cat $w.rss)"; done
for w in w0 w1; do kill -TERM $(cat $w.pid) 2>/dev/null; done
sleep 5
for w in w0 w1; do echo $w; grep -E "Elapsed|Maximum resident" $w.time; done
for q in $(seq 1 22); do
  /usr/bin/time -v -o l$q.time nice -n 10 $B query --array arr --strategy hw-isp --threads 2 --in-process --json q$q > l$q.json 2> l$q.err; rl=$?
  wl=$(grep Elapsed l$q.time | awk '{print $NF}'); ml=$(grep "Maximum resident" l$q.time | awk '{print $NF}')
  same=$(python3 -c "
import json
try:
  a=json.load(open('d$q.json'))['rows']; b=json.load(open('l$q.json'))['rows']
  print('equal' if a==b else 'DIFFER', len(a))
except Exception as e: print('ERR', e)
")
  echo -e "l q$q\trc=$rl\t$wl\t${ml} kB\t$same" | tee -a q.tsv
done
echo "end $(date -u +%T)"
