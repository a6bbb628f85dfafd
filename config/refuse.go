package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Bounds of values that parse but cannot work. Each is far beyond what a
// deployment uses, so only a typo or a unit mistake meets it.
const (
	// MaxWindow bounds dedup.window: one year.
	MaxWindow = 366 * 24 * time.Hour
	// MaxRecordBytes bounds dedup.max_record_bytes: a record must fit a
	// Kafka message (max.message.bytes is an int32) and one fetch.
	MaxRecordBytes ByteSize = 1 << 30
	// TxnTimeoutFactor: kafka.transaction_timeout must be at least this
	// many commit intervals. A transaction stays open for one interval
	// plus the commit's round trips; a timeout near the interval lets the
	// coordinator abort healthy cycles and fence the stage.
	TxnTimeoutFactor = 10
	// MinTxnTimeout is the least kafka.transaction_timeout accepted.
	MinTxnTimeout = time.Second
)

// explicitZeros reports fields set explicitly to a zero value that the
// defaults would otherwise silently replace: an empty dedup.key list would
// become the Kafka key, window: 0s the 24h default. Call it on the decoded
// config before ApplyDefaults; lines holds the fields the file sets.
func (c *Config) explicitZeros(v *validator) {
	// Set in the file, and decoded: a value that did not parse is already
	// reported and left zero.
	set := func(field string) bool {
		if _, ok := v.lines[field]; !ok {
			return false
		}
		for _, p := range v.problems {
			if p.Field == field {
				return false
			}
		}
		return true
	}
	if set("dedup.key") && len(c.Dedup.Key) == 0 {
		v.addf("dedup.key", `must list at least one field ("key" for the Kafka key, "json:a.b", "header:NAME"), got []`)
	}
	if set("dedup.window") && c.Dedup.Window == 0 {
		v.addf("dedup.window", "must be > 0, got 0s")
	}
	if set("dedup.generations") && c.Dedup.Generations == 0 {
		v.addf("dedup.generations", "must be in [1, 64], got 0")
	}
	if set("commit.interval") && c.Commit.Interval == 0 {
		v.addf("commit.interval", "must be > 0, got 0s")
	}
	if set("commit.max_records") && c.Commit.MaxRecords == 0 {
		v.addf("commit.max_records", "must be >= 1, got 0")
	}
	if set("kafka.transaction_timeout") && c.Kafka.TransactionTimeout == 0 {
		v.addf("kafka.transaction_timeout", "must be > 0, got 0s")
	}
	if set("dedup.max_record_bytes") && c.Dedup.MaxRecordBytes == 0 {
		v.addf("dedup.max_record_bytes", "must be > 0, got 0")
	}
}

// splitBrokers turns list entries holding several comma-separated
// addresses ("h1:9092,h2:9092", what "${KAFKA_BROKERS}" gives with the
// usual variable) into one entry each.
func (c *Config) splitBrokers() {
	var out []string
	for _, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ",") {
			out = append(out, b)
			continue
		}
		for _, part := range strings.Split(b, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	c.Kafka.Brokers = out
}

// CheckHostPort reports why s is not a host:port address a Kafka client can
// dial: a host without spaces or commas and a port in [1, 65535]. The job
// checks every broker address with it before kafka-go sees one.
func CheckHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", s)
	}
	if host == "" || strings.ContainsAny(host, " ,/\t") {
		return fmt.Errorf("want host:port with a host name or address, got %q", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("want a port in [1, 65535], got %q", port)
	}
	return nil
}

// checkListen reports why metrics.listen is neither "off" nor a host:port
// the listener can bind (port 0 picks a free port; an empty host binds
// every interface).
func checkListen(s string) error {
	if s == "off" {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf(`want host:port (127.0.0.1:9464, :9464) or "off", got %q`, s)
	}
	if strings.ContainsAny(host, " ,/\t") {
		return fmt.Errorf("want host:port with a host name or address, got %q", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("want a port in [0, 65535], got %q", port)
	}
	return nil
}

// validateLimits reports values that parse but cannot work; it runs with
// validate, after ApplyDefaults.
func (c *Config) validateLimits(v *validator) {
	if c.Dedup.Window > MaxWindow {
		v.addf("dedup.window", "must be at most %v (a year), got %v", MaxWindow, c.Dedup.Window)
	}
	if c.Dedup.MaxRecordBytes > MaxRecordBytes {
		v.addf("dedup.max_record_bytes", "must be at most %s (a record must fit one Kafka message and fetch), got %s", MaxRecordBytes, c.Dedup.MaxRecordBytes)
	}
	// state.memtable_size and state.memory: validateMemory (memory.go).
	if tt, ci := c.Kafka.TransactionTimeout, c.Commit.Interval; ci > 0 && (tt < MinTxnTimeout || tt < TxnTimeoutFactor*ci) {
		v.addf("kafka.transaction_timeout", "must be far above commit.interval (%v): at least %d times it and at least %v, got %v",
			ci, TxnTimeoutFactor, MinTxnTimeout, tt)
	}
	seen := map[int]int{}
	for i, p := range c.Assignment.Partitions {
		if j, dup := seen[p]; dup {
			v.addf(fmt.Sprintf("assignment.partitions[%d]", i), "partition %d is listed twice (also at [%d]): two stages cannot own one partition", p, j)
			continue
		}
		seen[p] = i
	}
	for i, b := range c.Kafka.Brokers {
		if err := CheckHostPort(b); err != nil {
			v.addf(fmt.Sprintf("kafka.brokers[%d]", i), "%v", err)
		}
	}
	if err := checkListen(c.Metrics.Listen); err != nil {
		v.addf("metrics.listen", "%v", err)
	}
}
