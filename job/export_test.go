package job

import "time"

// SetStateEvery changes how often runners refresh the state metrics and
// returns a function that restores the previous interval.
func SetStateEvery(d time.Duration) (restore func()) {
	old := stateEvery
	stateEvery = d
	return func() { stateEvery = old }
}
