package main

import (
	_ "github.com/bits-and-blooms/bloom/v3"
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/cockroachdb/pebble/v2/vfs/errorfs"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/segmentio/kafka-go"
	_ "github.com/segmentio/kafka-go/protocol"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "github.com/twmb/franz-go/pkg/kmsg"
	_ "github.com/zeebo/xxh3"
	_ "pgregory.net/rapid"
	_ "go.yaml.in/yaml/v3"
)

func main() {}
