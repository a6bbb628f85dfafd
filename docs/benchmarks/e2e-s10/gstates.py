import sys, re, collections
lines = open(sys.argv[1]).read().split('\n')
ev = []
i = 0
pat = re.compile(r'StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+) Reason="([^"]*)"')
while i < len(lines):
    l = lines[i]
    m = pat.search(l)
    if m:
        t, g, a, b, reason = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), m.group(5)
        stack = []
        j = i + 1
        if j < len(lines) and lines[j].startswith('TransitionStack='):
            j += 1
            while j < len(lines) and lines[j].startswith('\t'):
                if not lines[j].startswith('\t\t'):
                    stack.append(lines[j].strip().split(' @')[0])
                j += 1
        ev.append((t, g, a, b, reason, stack))
        i = j
        continue
    i += 1
role = {}
for t, g, a, b, r, st in ev:
    if a != 'Running' or not st: continue
    s = ' '.join(st)
    if 'runner).run' in s or 'CopyJob).partition' in s:
        role[g] = 'runner'
    elif 'prefetcher).work' in s:
        role[g] = 'prefetch'
    elif 'worker).loop' in s:
        role[g] = 'storeworker'
last = {}
tot = collections.defaultdict(lambda: collections.defaultdict(int))
why = collections.defaultdict(lambda: collections.defaultdict(int))
def key(st):
    keep = [f for f in st if 'dedupstream/dedupstream' in f]
    return ' < '.join(x.split('/')[-1] for x in keep[:int(sys.argv[2]) if len(sys.argv)>2 else 2])
t0 = ev[0][0]; t1 = ev[-1][0]
for t, g, a, b, r, st in ev:
    if g in last:
        lt, state, k = last[g]
        if g in role:
            tot[role[g]][state] += t - lt
            if state in ("Waiting", "Syscall"):
                why[role[g]][state[:4]+" "+k] += t - lt
    last[g] = (t, b, key(st) + (' [' + r + ']' if r else ''))
span = (t1 - t0) / 1e9
print('span %.3f s' % span)
for r in tot:
    n = sum(1 for g in role if role[g] == r)
    print('%s x%d: ' % (r, n) + ', '.join('%s %.3f' % (s, v / 1e9) for s, v in sorted(tot[r].items())))
    for k, v in sorted(why[r].items(), key=lambda x: -x[1])[:14]:
        print('   wait %.3f  %s' % (v / 1e9, k))
