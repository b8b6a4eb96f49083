package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/bucketry/ratelimit/core"
)

// ErrInvalidSpec reports a rule or a file that breaks the schema itself: an
// unknown field, a value of the wrong type, a field that the rule's algorithm
// does not use, a key_pattern that disagrees with scope. Problems with the
// numbers wrap core's sentinels instead (core.ErrInvalidRate,
// core.ErrInvalidBurst, core.ErrInvalidWindow, core.ErrUnknownScope,
// core.ErrDuplicateRule, core.ErrInvalidPlan, core.ErrInvalidRule). Match
// them with errors.Is.
var ErrInvalidSpec = errors.New("rules: invalid spec")

// Error is what Parse, Load, Compile and CompileRules return: it names the
// file and line (when the rules came from a file), the rule and the field at
// fault, and wraps the cause, which wraps ErrInvalidSpec or one of core's
// sentinel errors. Its message has the form
//
//	rules: limits.yaml:12: rule "search": burst_capacity: must be >= 1, got 0
//
// The zero value names nothing and wraps nothing.
type Error struct {
	File  string // the file's name as given to Parse or Load; "" for Compile
	Line  int    // the line, from 1; 0 when unknown
	Rule  string // the rule's name, or "#i", its position from 0, when it has none; "" for a top-level setting
	Field string // the field as the file spells it ("burst_capacity", "routes[1]"); "" for the whole rule or file
	Err   error  // the cause, wrapping ErrInvalidSpec or a core sentinel

	index int // the rule's position, -1 for the file's top level
}

// Error formats the error as "rules: FILE:LINE: rule "NAME": FIELD: reason",
// leaving out the parts that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	switch {
	case strings.HasPrefix(e.Rule, "#"):
		b.WriteString("rule " + e.Rule + ": ")
	case e.Rule != "":
		b.WriteString("rule " + strconv.Quote(e.Rule) + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(CauseText(e.Err))
	return b.String()
}

// CauseText returns the message of err, the cause of a field's error,
// without the package prefixes ("rules: ", "ratelimit: ") that the text
// before it already stands for, and "invalid" for a nil err. Other rule
// sources (adapters/postgres) end their errors with it too.
func CauseText(err error) string {
	if err == nil {
		return "invalid"
	}
	msg := err.Error()
	for _, p := range []string{"rules: ", "ratelimit: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Index returns the position, from 0, of the rule at fault among the specs
// given to Compile or CompileRules (the rules of the file, for Parse and
// Load), and false for an error about no one rule (a top-level setting, a
// file that cannot be read).
func (e *Error) Index() (int, bool) { return e.index, e.Rule != "" && e.index >= 0 }

// DuplicateError is the cause of an Error about a rule whose name an
// earlier rule has on an overlapping plan (the same plan, or either for
// every plan). It wraps core.ErrDuplicateRule.
type DuplicateError struct {
	Name    string // the name of both
	Derived string // the key_pattern the later rule's name was derived from; "" when given
	Other   int    // the earlier rule's position, from 0
	Plan    string // the earlier rule's plan, "" for every plan
}

// Error formats the error as
// `"search" is also rule #0's, for plan "free"; a name may repeat only on distinct plans`.
func (e *DuplicateError) Error() string { return e.Naming("rule #" + strconv.Itoa(e.Other)) }

// Naming returns the message of Error with other naming the earlier rule,
// for a source that knows its rules by names of its own (a table's
// rule_id).
func (e *DuplicateError) Naming(other string) string {
	if e.Derived != "" {
		return fmt.Sprintf("the name %q derived from key_pattern %q is also %s's, for plan %q; give one of them a name", e.Name, e.Derived, other, e.Plan)
	}
	return fmt.Sprintf("%q is also %s's, for plan %q; a name may repeat only on distinct plans", e.Name, other, e.Plan)
}

// Unwrap returns core.ErrDuplicateRule.
func (e *DuplicateError) Unwrap() error { return core.ErrDuplicateRule }

// reason is a cause written for a field: its message is the text alone
// ("must be >= 1, got 0"), and it wraps the sentinel.
type reason struct {
	sentinel error
	text     string
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.sentinel }

// because returns a cause wrapping sentinel with a formatted message.
func because(sentinel error, format string, args ...any) error {
	return &reason{sentinel: sentinel, text: fmt.Sprintf(format, args...)}
}
