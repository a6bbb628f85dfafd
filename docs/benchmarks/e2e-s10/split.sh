#!/bin/bash
# usage: split.sh N PROFILES...   (N = runs, for per-run seconds)
n=$1; shift
cum() { go tool pprof -top -nodefraction=0 -edgefraction=0 -focus="$1" ${2:+-ignore="$2"} "${P[@]}" 2>/dev/null | awk '/Showing nodes accounting/ {v=$5; sub(",","",v); print v; exit}'; }
P=("$@")
tot=$(go tool pprof -top "${P[@]}" 2>/dev/null | awk '/Total samples/ {for(i=1;i<=NF;i++) if($i=="="){print $(i+1); exit}}')
echo "total $tot (over $n runs)"
while IFS='|' read -r name re ign; do
  [ -z "$name" ] && continue
  v=$(cum "$re" "$ign")
  printf "%-28s %s\n" "$name" "${v:-0}"
done <<'LIST'
kfake|kfake
runner (job cycle)|job.\(\*runner\).run$
  decide|job.\(\*runner\).decide$
    Stage.Process|pipeline.\(\*Stage\).Process$
      Keyer/Key|pipeline.\(\*Keyer\)
      prepare(front)|batchProbe\).prepare
      MaskAllAdd|MaskAllAdd
      Stage.decide|pipeline.\(\*Stage\).decide$
      collapse|collapseSet
      Lookup|Reader\).Lookup
    convertRouted|job.convertRouted|
    metrics.batch|stageMetrics\).batch
    arena.record|arena\).record
  produce|job.\(\*runner\).produce$
  commit|job.\(\*runner\).commit$
    Stage.Commit|pipeline.\(\*Stage\).Commit$
    putAll|memIndex\).putAll
    appendCommit|appendCommit
    Expire|Store\).Expire
    prod.Flush|Producer\).Flush
    prod.Commit|Producer\).Commit$
    SendOffsets|SendOffsets
    met.committed|stageMetrics\).committed
  runner fetch|job.\(\*runner\).fetch$
prefetcher|prefetcher\).work
store worker|statestore.\(\*worker\)
copy partition|CopyJob\).partition
  copy fetch|CopyJob\).partition|
gc|gcBgMarkWorker
fetch decode (all)|decoder\).decodeRecords
encode (all)|Encoder\).AppendBatch
sink pipe / conn|sink.\(\*pipe\)
harness waitCommitted|waitCommitted
LIST
