package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/dedupstream/dedupstream/config"
	"github.com/twmb/franz-go/pkg/kfake"
)

func cmdBroker(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("broker", "broker [--dir DIR] [--port N] [--topics NAME:N,...]\n\nRun an embedded Kafka broker (kfake) on loopback until SIGTERM or SIGINT:\na local Kafka for development with nothing else installed. Not for production.", stdout, stderr)
	dir := fs.String("dir", "", "persist topics and offsets in `DIR` (empty: in memory only)")
	port := fs.Int("port", 9092, "listen on loopback `PORT` (0: any free port)")
	partitions := fs.Int("partitions", 4, "partitions of auto-created topics")
	topics := fs.String("topics", "orders-raw:4,orders:4,orders-dlq:1", "topics to create at start, as `NAME:PARTITIONS,...` (empty: none)")
	level := logLevelFlag(fs, "warn")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	log := newLogger(config.Log{Level: *level, Format: "auto"}, stderr)
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dedupstream broker: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(*partitions),
		kfake.WithLogger(kfakeLogger{log})}
	for t := range strings.SplitSeq(*topics, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		name, n, _ := strings.Cut(t, ":")
		np, err := strconv.Atoi(n)
		if name == "" || err != nil || np < 1 {
			fmt.Fprintf(stderr, "dedupstream broker: --topics: want NAME:PARTITIONS, got %q\n", t)
			return exitUsage
		}
		opts = append(opts, kfake.SeedTopics(int32(np), name))
	}
	if *port != 0 {
		opts = append(opts, kfake.Ports(*port))
	}
	if *dir != "" {
		opts = append(opts, kfake.DataDir(*dir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(stderr, "dedupstream broker: %v\n", err)
		return exitFailure
	}
	defer c.Close()
	fmt.Fprintf(stdout, "broker listening on %s\n", c.ListenAddrs()[0])
	log.Info("broker started", "addr", c.ListenAddrs()[0], "dir", *dir)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	fmt.Fprintln(stdout, "broker stopped")
	return exitOK
}
