#!/bin/bash
# split.sh PROFILE: CPU seconds of a sweep point's timed profile by owner.
# The stage and harness goroutines carry span=stage / span=harness labels
# (front, lookup and commit are parts of stage); the flusher, the merger
# and Pebble's sstable write queue are unlabelled goroutines. Needs go.
p=$1
sum() { go tool pprof -top -nodecount=100000 "$@" "$p" 2>/dev/null | grep -m1 "Showing nodes accounting for" | awk '{print $5}'; }
tot=$(go tool pprof -top -nodecount=1 "$p" 2>/dev/null | grep -o 'Total samples = [0-9.]*m\?s' | awk '{print $4}')
st=$(sum -tagfocus span=stage)
bloom=$(sum -tagfocus span=stage -focus 'MaskAllAdd')
look=$(sum -tagfocus span=stage -focus 'Reader..Lookup')
comm=$(sum -tagfocus span=stage -focus 'Stage..Commit')
ha=$(sum -tagfocus span=harness)
fl=$(sum -tagignore 'span=.' -focus 'flushMem|handOver')
mg=$(sum -tagignore 'span=.' -focus 'merger')
wq=$(sum -focus 'drainWriteQueue')
echo "$(basename "$p" .pprof): total $tot | stage $st (front $bloom, lookup $look, commit $comm) | harness $ha | flusher $fl  | merger $mg | sstable write queue $wq"
