#!/bin/bash
# ab.sh SEED A B... (from the repository root): one sweep per build (binaries /tmp/b/dsbench-X), same seed, one line each.
seed=$1; shift
for v in "$@"; do
  rm -rf /tmp/sw1d; mkdir -p /tmp/sw1d
  l0=$(cut -d' ' -f1 /proc/loadavg)
  /tmp/b/dsbench-$v -modes sweep -sweep 1M,100M -sweep-records 6M -no-redis -map-max-keys 1 -sweep-no-restart -seed $seed -dir /tmp/sw1d -out /tmp/swo-$v-$seed -timed-cpuprofile /tmp/prof/$v-$seed > /tmp/swo-$v-$seed.log 2>&1
  l1=$(cut -d' ' -f1 /proc/loadavg)
  r=$(grep -E '100M keys\) >=' /tmp/swo-$v-$seed.log | sed 's/.*100M keys: \([0-9.M]*\) records\/s, 1M keys: \([0-9.M]*\) records\/s: \([0-9.]*x\); by CPU per record \([0-9.]*\) \/ \([0-9.]*\) us: \([0-9.]*x\).*/100M \1 1M \2 ratio \3 cpu1M \4 cpu100M \5 cpuratio \6/')
  wb=$(grep 'keys=100M.*timed records' /tmp/swo-$v-$seed.log | grep -o '[0-9.]* bytes written per record')
  sp=$(bash docs/benchmarks/ratio-s11/split.sh /tmp/prof/$v-$seed-100000000.pprof | sed 's/.*| stage/stage/')
  echo "seed $seed $v load $l0-$l1 | $r | $wb | $sp"
done
