# Splits a "perf script -F time,ip,sym" dump of a dsbench e2e run by two timed spans
# (bounds in seconds from the first sample: copy job C0 C1, dedupstream D0 D1) and counts
# samples per package (mode bucket) or page-fault samples per user stack (mode fault).
import collections,sys
import perfsamples  # beside this script
wins={'copy':(float(sys.argv[2]),float(sys.argv[3])),'dedup':(float(sys.argv[4]),float(sys.argv[5]))}
mode=sys.argv[6] if len(sys.argv)>6 else 'fault'
agg={k:collections.Counter() for k in wins}
tot=collections.Counter()
samples,t0=perfsamples.read(sys.argv[1])
def short(s): return s.replace('github.com/dedupstream/dedupstream/','').replace('github.com/twmb/franz-go/pkg/','').replace('github.com/cockroachdb/pebble/v2/','pebble/')
for t,st in samples:
    for k,(a,b) in wins.items():
        if a<=t-t0<b:
            tot[k]+=1
            kern=[s for s,ik in st if ik]; user=[s for s,ik in st if not ik]
            isf='asm_exc_page_fault' in kern
            if mode=='fault' and not isf: continue
            # first "interesting" user frame: skip runtime.* 
            u=[short(x) for x in user if not x.startswith('runtime.') and not x.startswith('internal/') and not x.startswith('syscall.') and not x.startswith('encoding/') ]
            key=' < '.join(u[:3])
            if mode=='bucket':
                # classify by package of first non-runtime frame
                key=(u[0].split('.')[0] if u else 'runtime')
                if kern: key+=(' [fault]' if isf else ' [kern]')
            agg[k][key]+=1
for k in wins:
    print('=====',k,tot[k],'samples')
    for s,c in agg[k].most_common(int(sys.argv[7]) if len(sys.argv)>7 else 25): print('%5d %5.1f%% %s'%(c,100*c/tot[k],s[:200]))
