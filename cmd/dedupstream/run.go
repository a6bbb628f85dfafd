package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/job"
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
	// during start-up is a drain, not a kill.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if *level != "" {
		cfg.Log.Level = *level
	}
	log := newLogger(cfg.Log, stderr)
	log.Debug("config", "file", *path, "config", cfg)
	go func() {
		<-ctx.Done()
		log.Info("signal received: draining; a second signal exits at once")
		stop() // the next signal gets the default behaviour
	}()

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
	if err := j.Run(ctx); err != nil {
		if errors.Is(err, job.ErrTopics) {
			// The config does not match the cluster: fix one or the other.
			fmt.Fprintf(stderr, "%s: %v\n", *path, err)
			return exitUsage
		}
		log.Error("job failed", "err", err)
		fmt.Fprintf(stderr, "dedupstream: %v\n", err)
		return exitFailure
	}
	st := j.Stats()
	log.Info("stopped", "in", st.In, "out", st.Emitted, "dropped_batch", st.DroppedBatch,
		"dropped_history", st.DroppedHistory, "dlq", st.DeadLettered, "cycles", st.Cycles)
	return exitOK
}

// serveMetrics serves /metrics, /livez and /readyz (ready: every owned
// stage recovered and processing) on addr until the returned stop is
// called. bound is the address it listens on.
func serveMetrics(addr string, j *job.Job, log *slog.Logger) (bound string, stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(j.Collector(), job.NewBuildInfo(buildVersion()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !j.Ready() {
			http.Error(w, "not ready: stages recovering", http.StatusServiceUnavailable)
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
