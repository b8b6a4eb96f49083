package rules

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("500ms",
// "1m", "24h") in JSON and YAML. The zero value is 0, which a Spec reads as
// "not given". It is a plain value, safe for concurrent use.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does ("1m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string, as time.ParseDuration does: a
// number without a unit ("60") is an error, for its unit would be a guess.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%w: want a duration such as \"1s\", \"1m\" or \"24h\", got %q", ErrInvalidSpec, b)
	}
	*d = Duration(v)
	return nil
}
