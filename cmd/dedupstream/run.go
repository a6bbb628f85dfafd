package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// optionsHook lets this package's crash tests install failpoints in the
// job they run as a subprocess.
var optionsHook = func(*job.Options) {}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", "run --config FILE\n\nRun the job until SIGTERM or SIGINT, then commit the open cycles and exit 0.\nA second signal exits at once (the next start recovers).", stdout, stderr)
	path := fs.String("config", "", "job config `FILE` (YAML; see configs/reference.yaml)")
	level := logLevelFlag(fs, "")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "dedupstream run: want --config FILE and no other arguments")
		fs.Usage()
		return exitUsage
	}
	// Signals are caught before anything slow happens, so that SIGTERM
	// during start-up is a drain, not a kill. The context ends only on a
	// signal: the reason the job stops is then known for sure.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	cfg, log, ok := loadJob(*path, *level, stderr)
	if !ok {
		return exitUsage
	}
	log.Debug("config", "file", *path, "config", cfg)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case sig := <-sigs:
			log.Info("signal received: draining; a second signal exits at once", "signal", sig.String())
			signal.Stop(sigs) // the next signal gets the default behaviour
			cancel(&signalError{sig})
		case <-done:
		}
	}()

	job.TuneGC()
	opts := job.Options{Logger: log}
	optionsHook(&opts)
	j, err := job.New(cfg, opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if cfg.Metrics.Listen != "off" {
		_, stopServe, err := serveMetrics(cfg.Metrics.Listen, j, log)
		if err != nil {
			fmt.Fprintf(stderr, "dedupstream: metrics.listen: %v\n", err)
			return exitFailure
		}
		defer stopServe()
	}
	log.Info("starting", "version", versionString(), "job", cfg.Job.ID, "assignment", cfg.Assignment.Mode, "partitions", cfg.Assignment.Partitions,
		"input", cfg.Input.Topics, "output", cfg.Output.Topic, "dlq", cfg.Output.DLQTopic)
	return stopped(log, *path, stderr, j, j.Run(ctx), context.Cause(ctx))
}

// signalError is the cause of the run's context when a signal ended it.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string { return "signal " + e.sig.String() }

// stopped writes the final log line of run, saying why the job stopped,
// and returns the matching exit code: 0 after a signal's drain, 2 when the
// topics do not fit the config, 3 when fenced by another instance, 1 for
// any other failure.
func stopped(log *slog.Logger, path string, stderr io.Writer, j *job.Job, err, cause error) int {
	st := j.Stats()
	counts := []any{"in", st.In, "out", st.Emitted, "dropped_batch", st.DroppedBatch,
		"dropped_history", st.DroppedHistory, "dlq", st.DeadLettered, "cycles", st.Cycles}
	var sig *signalError
	switch {
	case err == nil && errors.As(cause, &sig):
		log.Info("stopped: drained after "+sig.Error(), append([]any{"exit_code", exitOK}, counts...)...)
		return exitOK
	case err == nil:
		// Run returns nil only when its context ends, which only a signal
		// does: anything else is a bug worth a failure.
		log.Error("stopped: the job ended without a signal and without an error", append([]any{"exit_code", exitFailure}, counts...)...)
		return exitFailure
	case errors.Is(err, job.ErrTopics):
		// The config does not match the cluster: fix one or the other.
		log.Error("stopped: the topics do not fit the config", "exit_code", exitUsage, "err", err)
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return exitUsage
	case errors.Is(err, sink.ErrFenced):
		log.Error("stopped: fenced; another instance owns a partition of this one, or the cause is undecided and kafka.on_fenced is exit (see the error)",
			append([]any{"exit_code", exitFenced, "err", err}, counts...)...)
		fmt.Fprintf(stderr, "dedupstream: %v\n", err)
		return exitFenced
	case errors.Is(err, job.ErrOtherWriter):
		log.Error("stopped: another producer writes to the output; stop it first (see the error)",
			append([]any{"exit_code", exitFenced, "err", err}, counts...)...)
		fmt.Fprintf(stderr, "dedupstream: %v\n", err)
		return exitFenced
	default:
		log.Error("stopped: job failed", append([]any{"exit_code", exitFailure, "err", err}, counts...)...)
		fmt.Fprintf(stderr, "dedupstream: %v\n", err)
		return exitFailure
	}
}

// serveMetrics serves /metrics, /livez and /readyz (ready: every owned
// stage recovered, processing, and reaching its brokers) on addr until the returned stop is
// called. bound is the address it listens on.
func serveMetrics(addr string, j *job.Job, log *slog.Logger) (bound string, stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(j.Collector(), job.NewBuildInfo(buildVersion()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := j.Readiness(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("serving metrics", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
