#!/bin/bash
# ab.sh SEED SWEEP DUP BUILD...: one sweep process per build, in the order
# given, same seed; prints per build the 100M / 1M line of the targets
# table, the 100M row's records/s, memory beyond the Bloom front, disk and
# store reads, CPU per record, and the timed 100M point's CPU by owner
# (../ratio-s11/split.sh). Builds are dsbench binaries in /tmp/b/dsbench-BUILD.
seed=$1; sw=$2; dup=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
for v in "$@"; do
  rm -rf /tmp/sw1d; mkdir -p /tmp/sw1d /tmp/prof
  l0=$(cut -d' ' -f1 /proc/loadavg)
  tag=$v-$seed-d$dup
  /tmp/b/dsbench-$v -modes sweep -sweep $sw -sweep-dup $dup -sweep-records 6M -no-redis -map-max-keys 1 \
    -sweep-no-restart -seed $seed -dir /tmp/sw1d -out /tmp/swo-$tag -timed-cpuprofile /tmp/prof/$tag > /tmp/swo-$tag.log 2>&1
  l1=$(cut -d' ' -f1 /proc/loadavg)
  rr=$(grep -E '100M keys\) >=' /tmp/swo-$tag.log | grep -o '100M keys: .*us: [0-9.]*x')
  row=$(grep -E '^\| dedupstream \| 100M' /tmp/swo-$tag/results.md | awk -F'|' '{print "rps",$7,"mem",$12,"disk",$13,"reads",$16}')
  cpu=$(grep -o 'keys=100M dup=[0-9.]*% dedupstream: timed records [0-9.]* us' /tmp/swo-$tag.log | grep -o '[0-9.]* us')
  sp=$(bash "$here/../ratio-s11/split.sh" /tmp/prof/$tag-100000000.pprof 2>/dev/null | sed 's/.*| stage/stage/')
  echo "$tag load $l0-$l1 | $rr | $row | cpu100 $cpu | $sp"
done
