package pipeline

import "time"

// ClockTime is a record's time on the stage clock when the wall clock reads
// wallMs (both Unix milliseconds): its timestamp, or wallMs for a timestamp
// more than MaxFutureSkew ahead of it. The stage decides with this clock,
// and a restore that picks which output records still matter must use the
// same one, or a record stamped far ahead would make the window look later
// than the stage will ever see it.
func (c *Config) ClockTime(tsMs, wallMs int64) int64 {
	if tsMs > wallMs+c.MaxFutureSkew.Milliseconds() {
		return wallMs
	}
	return tsMs
}

// Remembered is the longest a key emitted at one stage clock reading is
// remembered: Window + Window/Generations (the window plus the generation
// that is partly expired).
func (c *Config) Remembered() time.Duration {
	return c.Window + c.Window/time.Duration(c.Generations)
}

// RestoreFrom is the oldest record time a store rebuilt from the output
// must read when the newest output record on the stage clock is newestMs
// (see ClockTime): every key emitted at or after it can still be inside
// the window of a later decision, whose clock is never earlier than
// newestMs. MaxFutureSkew is added as a margin for records whose emission
// clock ran ahead of their own timestamp.
func (c *Config) RestoreFrom(newestMs int64) int64 {
	return newestMs - (c.Remembered() + c.MaxFutureSkew).Milliseconds()
}
