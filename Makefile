# dedupstream — make is the front door; every target is listed in the README.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s
BENCHOUT  ?= bench/results/latest
FUZZTIME  ?= 30s

CHAOS     ?= full
KAFKA     := testenv/kafka.sh

.PHONY: build test demo bench bench-full bench-kafka bench-go fuzz lint fmt kafka-up kafka-down test-kafka chaos

## build: compile every package and the dedupstream binary into bin/
build:
	$(GO) build $(PKGS)
	$(GO) build -o bin/dedupstream ./cmd/dedupstream

## demo: the job end to end on the embedded broker, checked by an independent reader
demo:
	$(GO) run ./cmd/dedupstream demo

## test: vet, then every test (unit, property, crash, embedded-broker) once
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)

## kafka-up: a 3-broker Apache Kafka cluster on loopback (jars from Maven on first use)
kafka-up:
	$(KAFKA) start 3

## kafka-down: stop the cluster
kafka-down:
	$(KAFKA) stop

## test-kafka: the broker-facing tests against the running cluster (make kafka-up first)
test-kafka:
	$(KAFKA) ready
	KAFKA_BROKERS=$$($(KAFKA) brokers) $(GO) test -count=1 -timeout 30m ./fetch ./sink ./job ./cmd/dedupstream

## chaos: the fault suite against the running 3-broker cluster; CHAOS=short|full, CHAOS_SEED replays, CHAOS_RUN narrows
chaos:
	$(KAFKA) ready
	KAFKA_BROKERS=$$($(KAFKA) brokers) CHAOS=$(CHAOS) $(GO) test -count=1 -v -timeout 60m -run '$(or $(CHAOS_RUN),.)' ./chaos

## bench: the harness, quick profile (a few minutes): engine, window sweep and end to end, next to the copy job, Redis SET NX and the map ceiling on the same stream
bench:
	$(GO) run ./bench/cmd/dsbench -profile quick -out $(BENCHOUT) $(BENCHFLAGS)

## bench-full: the published figures of docs/benchmarks.md: 1M/10M/100M keys in the window (~20 minutes)
bench-full:
	$(GO) run ./bench/cmd/dsbench -profile full -out $(BENCHOUT) $(BENCHFLAGS)

## bench-kafka: the real-cluster bench: 3 brokers in a network namespace, with and without 1 ms round trips, next to Kafka's own ProducerPerformance and ConsumerPerformance
bench-kafka:
	BENCHOUT=$(or $(filter-out bench/results/latest,$(BENCHOUT)),bench/results/kafka) BENCHFLAGS='$(BENCHFLAGS)' testenv/bench-kafka.sh

## bench-go: the Go benchmarks next to the code, with allocation counts (set BENCH=regexp to narrow)
bench-go:
	$(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -benchmem -benchtime $(BENCHTIME) -timeout 60m $(PKGS)

## fuzz: every fuzz target of every package for FUZZTIME each (default 30s)
fuzz:
	@for p in $$($(GO) list $(PKGS)); do \
		for t in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$t"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$p || exit 1; \
		done; \
	done

## lint: gofmt, go vet and staticcheck (pinned by go.mod's tool directive) must be clean
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')
