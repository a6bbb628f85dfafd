# Spreads the page-fault (mode F) or other (mode U) samples of stacks matching each pattern
# over 8 slices of one span: perf-tdist.py perf.txt T0 T1 pat1,pat2 [F|U]
import collections,sys
import perfsamples  # beside this script
a,b=float(sys.argv[2]),float(sys.argv[3])
pats=sys.argv[4].split(',')
mode=sys.argv[5] if len(sys.argv)>5 else 'F'
samples,t0=perfsamples.read(sys.argv[1])
nb=8; w=(b-a)/nb
for pat in pats:
    h=[0]*nb
    for t,st in samples:
        if a<=t-t0<b:
            kern=[s for s,ik in st if ik]
            if (mode=='F') != ('asm_exc_page_fault' in kern): continue
            user=[s for s,ik in st if not ik]
            u=[x for x in user if not x.startswith(('runtime.','internal/','syscall.'))]
            if u and pat in u[0]:
                h[int((t-t0-a)/w)]+=1
    print('%-40s'%pat, h)
