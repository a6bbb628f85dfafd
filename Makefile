# dedupstream — make is the front door; every target is listed in the README.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s
BENCHOUT  ?= bench/results/latest
FUZZTIME  ?= 30s

CHAOS     ?= full
KAFKA     := testenv/kafka.sh

.PHONY: build test demo bench bench-full bench-kafka bench-go fuzz lint fmt kafka-up kafka-down test-kafka chaos image

# make image: labels and version stamp (override on the command line).
VERSION        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION       ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_CREATED  ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_SOURCE   ?= https://github.com/dedupstream/dedupstream
IMAGE_LICENSES ?= NOASSERTION
IMAGE_ARCH     ?= amd64

## build: compile every package and the dedupstream binary into bin/
build:
	$(GO) build $(PKGS)
	$(GO) build -o bin/dedupstream ./cmd/dedupstream

## demo: the job end to end on the embedded broker, checked by an independent reader
demo:
	$(GO) run ./cmd/dedupstream demo

## test: vet, then every test (unit, property, crash, embedded-broker) once; then deploy/ (its own module: manifests, sizing, image)
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 -timeout 20m ./...

## image: the OCI image, no container daemon: bin/image/oci (OCI layout), bin/image/dedupstream.tar (docker load, crane push)
image:
	cd deploy && $(GO) run ./cmd/dsimage -module .. -out ../bin/image -version '$(VERSION)' -revision '$(REVISION)' \
		-created '$(IMAGE_CREATED)' -source '$(IMAGE_SOURCE)' -licenses '$(IMAGE_LICENSES)' -arch '$(IMAGE_ARCH)'

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

## lint: gofmt, go vet and staticcheck (pinned by go.mod's tool directive) must be clean; deploy/ (its own module) too
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	sc=$$($(GO) tool -n staticcheck) && cd deploy && $(GO) vet ./... && $$sc ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
