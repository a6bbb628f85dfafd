package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/kafkaauth"
	"github.com/dedupstream/dedupstream/internal/progress"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/segmentio/kafka-go"
)

const verifySynopsis = `verify [--config FILE] [--brokers H:P,...] [--topic T] [--key FIELDS] [--partitions 0,1,...] [--window D]

Audit a topic for repeated business keys. Every partition (or those given) is
read from its log start to its last stable offset with isolation level
read_committed (aborted transactions and markers are skipped), and each
record's business key is extracted as the job does: "key" (the Kafka key),
"header:NAME" or "json:a.b.c", several comma-separated fields forming one
composite key.

With --config the brokers (reached as its kafka.tls and kafka.sasl say), the
key fields and max_key_bytes come from the job file, the topic defaults to its
output.topic and the window to its dedup.window; flags override them. Without a window every repeat counts; with
one, a repeat farther than the window (in record time) from the occurrence it
repeats starts a new window instead, as in the job. Occurrences are compared in
read order: partition by partition, in offset order.

Prints progress to stderr and a summary with examples (partition and offset
of every occurrence) to stdout. Exit 0 when no key repeats, 1 when one does
(or the audit failed), 2 on usage errors.`

// verifySettings is what an audit needs, from a config file and flags.
type verifySettings struct {
	brokers    []string
	auth       kafkaauth.Auth // kafka.tls and kafka.sasl of the config, if given
	clientID   string
	topic      string
	key        []partition.Field
	maxKey     int
	partitions []int // nil: all
	window     time.Duration
	examples   int
}

func cmdVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", verifySynopsis, stdout, stderr)
	cfgPath := fs.String("config", "", "job config `FILE` supplying brokers, key fields, topic and window")
	brokers := fs.String("brokers", "", "bootstrap brokers `H:P,...`")
	topic := fs.String("topic", "", "`TOPIC` to audit (default with --config: output.topic)")
	key := fs.String("key", "", "business key `FIELDS`: key, header:NAME or json:a.b, comma-separated for a composite key (default key)")
	parts := fs.String("partitions", "", "audit only these `PARTITIONS` (comma-separated; default all)")
	window := fs.Duration("window", 0, "repeats farther apart than `D` in record time are not repeats (0: every repeat counts; default with --config: dedup.window)")
	examples := fs.Int("examples", 5, "show up to `N` repeated keys with their occurrences")
	level := logLevelFlag(fs, "warn")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	s := verifySettings{clientID: "dedupstream-verify", maxKey: partition.DefaultMaxKeyLen, examples: *examples}
	keySpec := "key"
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		if s.auth, err = kafkaauth.New(cfg.Kafka); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", *cfgPath, err)
			return exitUsage
		}
		pc, err := cfg.Pipeline()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", *cfgPath, err)
			return exitUsage
		}
		s.brokers, s.topic, s.window, s.maxKey = cfg.Kafka.Brokers, cfg.Output.Topic, pc.Window, pc.MaxKeyBytes
		keySpec = strings.Join(cfg.Dedup.Key, ",")
	}
	if set["brokers"] {
		s.brokers = splitList(*brokers)
	}
	if set["topic"] {
		s.topic = *topic
	}
	if set["key"] {
		keySpec = *key
	}
	if set["window"] {
		s.window = *window
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if len(s.brokers) == 0 {
		problems = append(problems, "want --brokers or --config")
	}
	if s.topic == "" {
		problems = append(problems, "want --topic or --config")
	}
	for _, f := range splitList(keySpec) {
		field, err := partition.ParseField(f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("--key %q: %v", f, err))
			continue
		}
		s.key = append(s.key, field)
	}
	if _, err := partition.NewExtractor(s.key, s.maxKey); err != nil && len(s.key) > 0 {
		problems = append(problems, fmt.Sprintf("--key: %v", err))
	}
	if len(s.key) == 0 {
		problems = append(problems, "--key: no fields")
	}
	for _, p := range splitList(*parts) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			problems = append(problems, fmt.Sprintf("--partitions: want partition numbers, got %q", p))
			continue
		}
		s.partitions = append(s.partitions, n)
	}
	if s.window < 0 || s.examples < 0 {
		problems = append(problems, "--window and --examples must be >= 0")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "dedupstream verify: %s\n", p)
		}
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(config.Log{Level: *level, Format: "auto"}, stderr)
	a, err := newAudit(s)
	if err != nil {
		fmt.Fprintf(stderr, "dedupstream verify: %v\n", err)
		return exitUsage
	}
	rep, err := a.run(ctx, log, stderr)
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "dedupstream verify: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "dedupstream verify: %v\n", err)
		return exitFailure
	}
	rep.print(stdout, s)
	if rep.repeatedKeys > 0 {
		return exitFailure
	}
	return exitOK
}

// usageError is an audit failure caused by the arguments (no such topic
// or partition).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// keyState is what the audit keeps per distinct key: the occurrence that
// opened the key's current window, and where its example is. 32 bytes plus
// the 16-byte hash per key; full keys are kept for examples only.
type keyState struct {
	anchorMs  int64
	anchorOff int64
	anchorP   int32
	example   int32 // index+1 into the examples; -1: repeated, no example; 0: not repeated
}

// occurrence is one record of a repeated key, for the examples.
type occurrence struct {
	partition int
	offset    int64
	time      time.Time
}

type example struct {
	key  []byte
	occs []occurrence
	more int // occurrences beyond those kept
}

// maxExampleOccurrences bounds the occurrences shown per example.
const maxExampleOccurrences = 10

type audit struct {
	s      verifySettings
	ext    *partition.Extractor
	client *kafka.Client
	keys   map[partition.Hash]keyState
	rep    verifyReport
	keyBuf []byte
}

// verifyReport is the outcome of an audit.
type verifyReport struct {
	partitions   []int
	records      int64
	noKey        int64
	distinct     int
	repeatedKeys int
	repeats      int64 // records that repeat an earlier one in its window
	examples     []example
	took         time.Duration
}

func newAudit(s verifySettings) (*audit, error) {
	ext, err := partition.NewExtractor(s.key, s.maxKey)
	if err != nil {
		return nil, err
	}
	return &audit{
		s:   s,
		ext: ext,
		client: &kafka.Client{Addr: kafka.TCP(s.brokers...), Transport: &kafka.Transport{
			ClientID: s.clientID, DialTimeout: 10 * time.Second, TLS: s.auth.TLS, SASL: s.auth.SASL}},
		keys: map[partition.Hash]keyState{},
	}, nil
}

func (a *audit) run(ctx context.Context, log *slog.Logger, progressTo io.Writer) (*verifyReport, error) {
	start := time.Now()
	parts, err := a.partitionsToRead(ctx)
	if err != nil {
		return nil, err
	}
	a.rep.partitions = parts
	type span struct {
		f        *fetch.Fetcher
		from, to int64
	}
	var spans []span
	var total int64
	for _, p := range parts {
		f, err := fetch.New(a.client, a.s.topic, p, fetch.Options{ClientID: a.s.clientID, Logger: log, RetryTimeout: 30 * time.Second})
		if err != nil {
			return nil, err
		}
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s/%d: list offsets: %w", a.s.topic, p, err)
		}
		spans = append(spans, span{f, offs.Earliest, offs.LastStable})
		total += max(offs.LastStable-offs.Earliest, 0)
	}
	prog := progress.New(progressTo, "verify "+a.s.topic+" (offsets)", total)
	var done int64
	for _, sp := range spans {
		if sp.to <= sp.from {
			continue
		}
		p := sp.f.Partition()
		err := sp.f.ReadRange(ctx, sp.from, sp.to, func(b *fetch.Batch) error {
			for i := range b.Records {
				a.record(p, &b.Records[i])
			}
			prog.Set(done + b.NextOffset - sp.from)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", a.s.topic, p, err)
		}
		done += sp.to - sp.from
		prog.Set(done)
	}
	prog.Finish()
	a.rep.distinct = len(a.keys)
	a.rep.took = time.Since(start)
	return &a.rep, nil
}

// partitionsToRead checks the topic and the asked-for partitions.
func (a *audit) partitionsToRead(ctx context.Context) ([]int, error) {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	md, err := a.client.Metadata(mctx, &kafka.MetadataRequest{Topics: []string{a.s.topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", a.s.topic, err)
	}
	n := 0
	for _, t := range md.Topics {
		if t.Name == a.s.topic && t.Error == nil {
			n = len(t.Partitions)
		}
	}
	if n == 0 {
		return nil, &usageError{fmt.Sprintf("topic %q does not exist", a.s.topic)}
	}
	if a.s.partitions == nil {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		return parts, nil
	}
	for _, p := range a.s.partitions {
		if p >= n {
			return nil, &usageError{fmt.Sprintf("--partitions: topic %q has %d partitions, no partition %d", a.s.topic, n, p)}
		}
	}
	parts := slices.Clone(a.s.partitions)
	slices.Sort(parts)
	return slices.Compact(parts), nil
}

// record audits one record. It allocates only for a new distinct key (the
// map entry) and for examples.
func (a *audit) record(p int, r *fetch.Record) {
	a.rep.records++
	key, err := a.ext.Extract(a.keyBuf[:0], &partition.Record{Key: r.Key, Value: r.Value, Headers: r.Headers})
	if err != nil {
		a.rep.noKey++
		return
	}
	a.keyBuf = key[:0]
	h := partition.HashKey(key)
	ms := r.Timestamp.UnixMilli()
	ks, seen := a.keys[h]
	if !seen || a.s.window > 0 && absDiff(ms, ks.anchorMs) > a.s.window.Milliseconds() {
		// A first occurrence, or one beyond the window of the last: it
		// opens a new window. An example keeps its key's history.
		ex := ks.example
		a.keys[h] = keyState{anchorMs: ms, anchorOff: r.Offset, anchorP: int32(p), example: ex}
		if ex > 0 {
			a.rep.examples[ex-1].add(occurrence{p, r.Offset, r.Timestamp})
		}
		return
	}
	a.rep.repeats++
	if ks.example == 0 { // the key's first repeat
		a.rep.repeatedKeys++
		if len(a.rep.examples) < a.s.examples {
			a.rep.examples = append(a.rep.examples, example{
				key:  slices.Clone(key),
				occs: []occurrence{{int(ks.anchorP), ks.anchorOff, time.UnixMilli(ks.anchorMs).UTC()}},
			})
			ks.example = int32(len(a.rep.examples))
		} else {
			ks.example = -1 // counted, no example
		}
		a.keys[h] = ks
	}
	if ks.example > 0 {
		a.rep.examples[ks.example-1].add(occurrence{p, r.Offset, r.Timestamp})
	}
}

func (e *example) add(o occurrence) {
	if len(e.occs) < maxExampleOccurrences {
		e.occs = append(e.occs, o)
		return
	}
	e.more++
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

func (r *verifyReport) print(w io.Writer, s verifySettings) {
	fmt.Fprintf(w, "topic %s, partitions %v, read_committed, %v\n", s.topic, r.partitions, r.took.Round(time.Millisecond))
	win := "none (every repeat counts)"
	if s.window > 0 {
		win = s.window.String() + " in record time"
	}
	fmt.Fprintf(w, "  %-16s %d\n", "records", r.records)
	fmt.Fprintf(w, "  %-16s %d\n", "without a key", r.noKey)
	fmt.Fprintf(w, "  %-16s %d\n", "distinct keys", r.distinct)
	fmt.Fprintf(w, "  %-16s %s\n", "window", win)
	fmt.Fprintf(w, "  %-16s %d\n", "repeated keys", r.repeatedKeys)
	fmt.Fprintf(w, "  %-16s %d\n", "repeat records", r.repeats)
	if r.repeatedKeys == 0 {
		fmt.Fprintln(w, "PASS: no business key repeated")
		return
	}
	fmt.Fprintf(w, "examples (%d of %d repeated keys):\n", len(r.examples), r.repeatedKeys)
	for _, e := range r.examples {
		fmt.Fprintf(w, "  key %q:\n", e.key)
		for _, o := range e.occs {
			fmt.Fprintf(w, "    partition %d offset %d at %s\n", o.partition, o.offset, o.time.UTC().Format(time.RFC3339Nano))
		}
		if e.more > 0 {
			fmt.Fprintf(w, "    ... %d more\n", e.more)
		}
	}
	fmt.Fprintf(w, "FAIL: %d business keys repeated\n", r.repeatedKeys)
}
