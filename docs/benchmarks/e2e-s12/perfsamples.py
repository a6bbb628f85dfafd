# Reads a "perf script -F time,ip,sym" dump (with call stacks) into a list of
# (seconds, [(symbol, is_kernel), ...]) and returns it with the first sample's time.
def read(path):
    samples = []
    cur, stack = None, []
    for line in open(path):
        if not line.strip():
            continue
        if not line.startswith('\t'):
            if cur is not None:
                samples.append((cur, stack))
            cur, stack = float(line.strip().rstrip(':')), []
            continue
        p = line.strip().split(None, 1)
        stack.append((p[1] if len(p) > 1 else '?', p[0].startswith('ffffffff')))
    samples.append((cur, stack))
    return samples, samples[0][0]
