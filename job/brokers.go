package job

import (
	"errors"
	"fmt"

	"github.com/dedupstream/dedupstream/config"
)

// checkBrokers refuses broker addresses kafka-go cannot dial: it panics on
// some (an index out of range in its transport for "h1:9092,h2:9092"), so
// none may reach it unchecked, whether the config came from a file (where
// config.Load already split such lists) or was built in code.
func checkBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("job: kafka.brokers: required: at least one host:port")
	}
	var errs []error
	for i, b := range brokers {
		if err := config.CheckHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("job: kafka.brokers[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
