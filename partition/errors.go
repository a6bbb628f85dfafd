package partition

import (
	"errors"
	"strconv"
)

// Reason says why a business key could not be taken from a record. Its
// String form is stable: the job writes it into the DLQ header that tells an
// operator why a record was set aside, and dashboards count by it.
type Reason uint8

// Reasons a record yields no business key. The zero Reason is never returned.
const (
	// NotJSON: a JSON field was configured but the record value is not a
	// valid JSON text (this includes an empty or null value).
	NotJSON Reason = iota + 1
	// FieldMissing: the record has no such key, header or JSON field, or
	// the JSON field is null.
	FieldMissing
	// NotScalar: the JSON field is an object or an array.
	NotScalar
	// KeyTooLong: the encoded business key would exceed the configured
	// maximum length.
	KeyTooLong
	// EmptyKey: the key, header or JSON string exists but is empty. An
	// empty key would make every such record a duplicate of the first one.
	EmptyKey
	// BadVersion: the version field is not a non-negative integer that
	// fits in 64 bits.
	BadVersion
)

var reasonNames = [...]string{
	0:            "unknown",
	NotJSON:      "not_json",
	FieldMissing: "field_missing",
	NotScalar:    "not_scalar",
	KeyTooLong:   "key_too_long",
	EmptyKey:     "empty_key",
	BadVersion:   "bad_version",
}

// String returns the stable snake_case name of r, such as "field_missing".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// KeyError reports a record from which no business key (or version) could be
// extracted. The job routes such records to the DLQ with Reason in a header;
// it is never a reason to stop.
type KeyError struct {
	// Reason classifies the failure.
	Reason Reason
	// Field is the config spelling of the field that failed, such as
	// "json:order.id" or "header:event-id".
	Field string
	// Offset is, for NotJSON, the byte offset in the record value at which
	// the JSON scanner stopped. It is 0 for other reasons.
	Offset int
	// Size and Max are, for KeyTooLong, the encoded length the key would
	// have reached when this field was added (a lower bound of the full
	// length) and the configured maximum. Both are 0 for other reasons.
	Size, Max int
}

// Error implements error.
func (e *KeyError) Error() string {
	msg := "partition: key field " + e.Field + ": " + e.Reason.String()
	switch e.Reason {
	case NotJSON:
		msg += " (at byte " + strconv.Itoa(e.Offset) + ")"
	case KeyTooLong:
		msg += " (" + strconv.Itoa(e.Size) + " bytes, max " + strconv.Itoa(e.Max) + ")"
	case BadVersion:
		msg += " (want a non-negative integer below 2^64)"
	}
	return msg
}

// ReasonOf returns the Reason of the first *KeyError in err's chain.
func ReasonOf(err error) (Reason, bool) {
	if ke, ok := err.(*KeyError); ok {
		// The unwrapped error the extractor returns: no allocation, so the
		// stage's DLQ path stays allocation-free.
		return ke.Reason, true
	}
	var ke *KeyError // escapes to errors.As: allocated on this path only
	if errors.As(err, &ke) {
		return ke.Reason, true
	}
	return 0, false
}

// keyError builds the error on the failure path. It is kept out of line so
// that, however Extract is inlined or reshaped, the heap allocation of the
// *KeyError stays on the failure path; TestExtractDoesNotAllocate checks
// that the success path allocates nothing and a failure exactly once.
//
//go:noinline
func keyError(r Reason, field string, offset int) error {
	return &KeyError{Reason: r, Field: field, Offset: offset}
}

//go:noinline
func tooLongError(field string, size, max int) error {
	return &KeyError{Reason: KeyTooLong, Field: field, Size: size, Max: max}
}
