# usage: summ.py LOG [400k|2M]: per arm, the ratio and CPU per record of each round of an e2e log
import re, sys, statistics as st, collections
size=sys.argv[2] if len(sys.argv)>2 else '400k'
records={'400k':400000,'2M':2000000}[size]
arm=None; load=None
rows=collections.defaultdict(list)  # arm -> list of (round, ratio, dcpu list, ccpu list, load)
cur=None
for l in open(sys.argv[1]):
    m=re.match(r'=== round (\d+) arm (\w) load ([\d.]+)', l)
    if m:
        cur={'round':int(m.group(1)),'arm':m.group(2),'load':float(m.group(3)),'d':[],'c':[],'dr':[],'cr':[]}
        rows[cur['arm']].append(cur); continue
    m=re.search(r'(copy-job|dedupstream) \S+: timed span ([\d.]+) us of process CPU per record, ([\d.]+) minor', l)
    if m: cur['d' if m.group(1)=='dedupstream' else 'c'].append(float(m.group(2))); continue
    m=re.search(r'rep \d (copy-job|dedupstream): '+size+r' records in ([\d.]+)s', l)
    if m: cur['dr' if m.group(1)=='dedupstream' else 'cr'].append(records/float(m.group(2))/1000); continue
for arm in sorted(rows):
    rs=[r for r in rows[arm] if r['dr'] and r['cr']]
    ratios=[st.median(r['dr'])/st.median(r['cr']) for r in rs]
    dc=[x for r in rs for x in r['d']]; cc=[x for r in rs for x in r['c']]
    print(arm, 'rounds', len(rs), 'loads', [r['load'] for r in rs])
    print('   ratio per round', ['%.2f'%x for x in ratios], 'median %.2f'%st.median(ratios) if ratios else '')
    print('   dedup k rec/s', ['%.0f'%x for r in rs for x in r['dr']], 'copy', ['%.0f'%x for r in rs for x in r['cr']])
    if dc: print('   cpu us/rec dedup median %.3f %s copy median %.3f %s  cpu ratio %.2f'%(st.median(dc), ['%.2f'%x for x in dc], st.median(cc), ['%.2f'%x for x in cc], st.median(dc)/st.median(cc)))
