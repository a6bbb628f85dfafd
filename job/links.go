package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dedupstream/dedupstream/sink"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// links watches, per stage, whether the brokers answer: every request of a
// stage (fetches, produces, coordinator calls, the read-back of the output)
// goes through its link's RoundTripper, or, for the produce requests on the
// producer's own connections, is told to its link by the producer
// (sink.Config.Watch); either way the link notes answers, failures and
// waiting requests. A stage with a request waiting or failing and no answer
// for UnreachableAfter is unreachable: one warning when that starts, one
// when the brokers answer again (with the outage's length), /readyz 503 in
// between, and the age of the last answer as a gauge all along. Requests
// and their timeouts are not changed: this only watches them.
type links struct {
	after time.Duration
	log   *slog.Logger
	now   func() time.Time

	mu    sync.Mutex
	parts map[int]*link
	// lastCheck is the time of the last check; quietUntil ends the grace
	// after the process itself stood still (see check).
	lastCheck, quietUntil time.Time
}

// link is the state of one stage's connection to the brokers.
type link struct {
	p        int
	lastOK   time.Time // last answer, or when the link was made
	lastFail time.Time // last request that ended without an answer
	waiting  int       // requests in flight
	since    time.Time // when the oldest request in flight was sent
	down     bool      // reported unreachable
	outages  uint64
	fences   map[string]uint64 // by cause
}

func newLinks(after time.Duration, log *slog.Logger) *links {
	return &links{after: after, log: log, now: time.Now, parts: map[int]*link{}}
}

// link returns stage p's link, made now if it has none.
func (l *links) link(p int) *link {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk, ok := l.parts[p]
	if !ok {
		lk = &link{p: p, lastOK: l.now(), fences: map[string]uint64{}}
		l.parts[p] = lk
	}
	return lk
}

// client returns a client for stage p whose requests go through p's link.
func (l *links) client(p int, c *kafka.Client) *kafka.Client {
	rt := c.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return &kafka.Client{Addr: c.Addr, Transport: &watched{rt: rt, l: l, lk: l.link(p)}, Timeout: c.Timeout}
}

// producerWatch returns what stage p's producer tells of the requests on
// its own produce connections (sink.Config.Watch): they count on p's link
// as the requests of client(p) do, so a produce connection that breaks or
// an answer that does not come shows as an outage too.
func (l *links) producerWatch(p int) sink.RequestWatch {
	return &watchedPipe{l: l, lk: l.link(p)}
}

// forget drops stage p's link: its partition is no longer run here (group
// mode), so its brokers are no concern of this instance's readiness.
func (l *links) forget(p int) {
	l.mu.Lock()
	lk := l.parts[p]
	delete(l.parts, p)
	down := lk != nil && lk.down
	l.mu.Unlock()
	if down {
		l.log.Info("partition no longer run here; it was unreachable", "partition", p)
	}
}

// fenced counts a fence of stage p by its cause.
func (l *links) fenced(p int, cause string) {
	l.mu.Lock()
	if lk := l.parts[p]; lk != nil {
		lk.fences[cause]++
	}
	l.mu.Unlock()
}

// watched is a stage's RoundTripper: the job's transport, watched.
type watched struct {
	rt kafka.RoundTripper
	l  *links
	lk *link
}

func (w *watched) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	w.l.begin(w.lk)
	res, err := w.rt.RoundTrip(ctx, addr, req)
	w.l.end(w.lk, err)
	return res, err
}

// watchedPipe is a stage's sink.RequestWatch: its producer's own
// connections, watched like the transport.
type watchedPipe struct {
	l  *links
	lk *link
}

func (w *watchedPipe) RequestSent()          { w.l.begin(w.lk) }
func (w *watchedPipe) RequestDone(err error) { w.l.end(w.lk, err) }

func (l *links) begin(lk *link) {
	l.mu.Lock()
	if lk.waiting == 0 {
		lk.since = l.now()
	}
	lk.waiting++
	l.mu.Unlock()
}

// end notes the outcome of a request: an answer (err nil; broker error
// codes are answers too), a failure, or neither when the caller gave up
// (shutdown).
func (l *links) end(lk *link, err error) {
	now := l.now()
	l.mu.Lock()
	lk.waiting--
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			lk.lastFail = now
		}
		l.mu.Unlock()
		return
	}
	was, silent := lk.down, now.Sub(lk.lastOK)
	lk.lastOK, lk.down = now, false
	l.mu.Unlock()
	if was {
		l.log.Warn("brokers answer again", "partition", lk.p, "outage", silent.Round(time.Millisecond))
	}
}

// check reports the links that became unreachable since the last check.
//
// A process that stood still (SIGSTOP, a paused VM) finds every request
// late when it runs again, although the brokers may have answered long
// ago. When the checks themselves were held up by more than
// UnreachableAfter, that is said instead, and no link is reported for one
// more UnreachableAfter: enough for answers already received to be read.
func (l *links) check() {
	now := l.now()
	var newly []*link
	var silent []time.Duration
	l.mu.Lock()
	last := l.lastCheck
	l.lastCheck = now
	if !last.IsZero() && now.Sub(last) > l.after {
		l.quietUntil = now.Add(l.after)
		l.mu.Unlock()
		l.log.Warn("the process did not run for a while (stopped, or its machine paused): broker answers are read now, outages are judged again after unreachable_after",
			"stood_still", now.Sub(last).Round(time.Millisecond), "unreachable_after", l.after)
		return
	}
	if now.Before(l.quietUntil) {
		l.mu.Unlock()
		return
	}
	for _, lk := range l.parts {
		if lk.down || now.Sub(lk.lastOK) < l.after {
			continue
		}
		waitingLong := lk.waiting > 0 && now.Sub(lk.since) >= l.after
		if waitingLong || lk.lastFail.After(lk.lastOK) {
			lk.down = true
			lk.outages++
			newly = append(newly, lk)
			silent = append(silent, now.Sub(lk.lastOK))
		}
	}
	l.mu.Unlock()
	for i, lk := range newly {
		l.log.Warn("brokers not answering: requests are retried, the partition keeps its state and resumes when they answer",
			"partition", lk.p, "silent_for", silent[i].Round(time.Millisecond), "unreachable_after", l.after)
	}
}

// watch runs check until ctx ends, every fifth of UnreachableAfter (at most
// every second).
func (l *links) watch(ctx context.Context) {
	t := time.NewTicker(min(max(l.after/5, 10*time.Millisecond), time.Second))
	defer t.Stop()
	l.mu.Lock()
	l.lastCheck = l.now()
	l.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.check()
		}
	}
}

// unreachable returns the partitions reported unreachable now, sorted, with
// how long each has had no answer.
func (l *links) unreachable() ([]int, []time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []int
	for p, lk := range l.parts {
		if lk.down {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	ages := make([]time.Duration, len(parts))
	for i, p := range parts {
		ages[i] = now.Sub(l.parts[p].lastOK)
	}
	return parts, ages
}

var (
	descResponseAge = prometheus.NewDesc("dedupstream_broker_response_age_seconds", "Seconds since the stage's last answer from a broker (any request: fetch, produce, coordinator); it grows while the brokers cannot be reached.", lp, nil)
	descUnreachable = prometheus.NewDesc("dedupstream_broker_unreachable", "1 while the stage has had a request waiting or failing and no broker answer for kafka.unreachable_after, else 0.", lp, nil)
	descOutages     = prometheus.NewDesc("dedupstream_broker_outages_total", "Times the stage's brokers became unreachable (see dedupstream_broker_unreachable).", lp, nil)
	descFences      = prometheus.NewDesc("dedupstream_producer_fenced_total", "Fences of the stage's producer, by cause: taken_over (another producer initialised the transactional id), timed_out (the coordinator aborted a transaction left open past the transaction timeout), undecided.", []string{"partition", "cause"}, nil)
)

func (l *links) describe(ch chan<- *prometheus.Desc) {
	ch <- descResponseAge
	ch <- descUnreachable
	ch <- descOutages
	ch <- descFences
}

func (l *links) collect(ch chan<- prometheus.Metric) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, lk := range l.parts {
		ps := strconv.Itoa(p)
		down := 0.0
		if lk.down {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(descResponseAge, prometheus.GaugeValue, now.Sub(lk.lastOK).Seconds(), ps)
		ch <- prometheus.MustNewConstMetric(descUnreachable, prometheus.GaugeValue, down, ps)
		ch <- prometheus.MustNewConstMetric(descOutages, prometheus.CounterValue, float64(lk.outages), ps)
		for _, cause := range []string{"taken_over", "timed_out", "undecided"} {
			ch <- prometheus.MustNewConstMetric(descFences, prometheus.CounterValue, float64(lk.fences[cause]), ps, cause)
		}
	}
}

// Readiness is the /readyz answer: ready when an assignment is current,
// every stage of it has completed recovery and processes input, and no
// stage is cut off from its brokers; otherwise why not.
func (j *Job) Readiness() (bool, string) {
	if parts, ages := j.links.unreachable(); len(parts) > 0 {
		var b strings.Builder
		b.WriteString("not ready: brokers not answering for partition")
		for i, p := range parts {
			fmt.Fprintf(&b, " %d (%v)", p, ages[i].Round(time.Second))
		}
		return false, b.String()
	}
	if !j.Ready() {
		return false, "not ready: stages recovering"
	}
	return true, "ok"
}
