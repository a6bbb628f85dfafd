# Medians of the per-run lines of an A/B log (ab-runs.txt).
import re,sys,statistics as st,collections
d=collections.defaultdict(list); f=collections.defaultdict(list); h2=collections.defaultdict(list); r=collections.defaultdict(list)
for line in open(sys.argv[1]):
    m=re.match(r'pair (\d+) (\S+) load \S+ (\S+) \S+: timed span ([0-9.]+) us of process CPU per record, ([0-9.]+) minor faults.*second half \(after \d+ records\) ([0-9.]+) us',line)
    if m:
        p,arm,sys_,us,fl,us2=m.groups()
        d[(arm,sys_)].append(float(us)); f[(arm,sys_)].append(float(fl)); h2[(arm,sys_)].append(float(us2))
    m=re.match(r'pair (\d+) (\S+) ratio\s+([0-9.]+)x',line)
    if m: r[m.group(2)].append(float(m.group(3)))
for k in sorted(d):
    print(k,'n=%d'%len(d[k]),'span median %.3f'%st.median(d[k]),'faults %.4f'%st.median(f[k]),'2nd half median %.3f'%st.median(h2[k]), 'all', ' '.join('%.3f'%x for x in d[k]))
for k in r: print(k,'ratio median %.2f'%st.median(r[k]),r[k])
