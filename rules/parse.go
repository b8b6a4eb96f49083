package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bucketry/ratelimit/core"
	"go.yaml.in/yaml/v3"
)

// Load reads the rules file at path and compiles it, as Parse does with
// path as the name.
func Load(path string) (*core.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Err: err, index: -1}
	}
	return Parse(path, data)
}

// Parse reads a rules file and compiles it into a policy. name chooses the
// format by its extension: YAML for .yaml and .yml, JSON for .json
// (case-insensitive); any other is an error. name is also the file's name
// in errors.
//
// The document is a mapping with default_plan, reject_unknown_plan and
// rules, a list of rules with the fields of Spec (see the package
// documentation). An unknown field, a field given twice, a value of the
// wrong type, an empty document, a document without rules and a second
// YAML document ("---" and more; a "---" that ends the file with nothing
// after it is no document) are errors; "rules: []" is a policy
// without rules. null is the same as leaving the field out. Every error is
// an *Error naming the file, the line, the rule and the field, wrapping
// ErrInvalidSpec or a core sentinel:
//
//	rules: limits.yaml:12: rule "search": burst_capacity: must be >= 1, got 0
//
// It is safe for concurrent use.
func Parse(name string, data []byte) (*core.Policy, error) {
	f, pos, err := decode(name, data)
	if err != nil {
		return nil, err
	}
	p, err := f.Policy()
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			e.File, e.Line = name, pos.line(e.index, e.Field)
		}
		return nil, err
	}
	return p, nil
}

// positions records the line of each field of a decoded file.
type positions struct {
	top   map[string]int   // top-level field -> line
	rules []map[string]int // per rule: field -> line, "" -> the rule's line
}

// line returns the line of field of rule i (-1: the top level), or of the
// rule when the field has none, or 0.
func (p *positions) line(i int, field string) int {
	if i < 0 {
		return p.top[field]
	}
	if i >= len(p.rules) {
		return 0
	}
	if l, ok := p.rules[i][field]; ok {
		return l
	}
	return p.rules[i][""]
}

// decode reads the document into a File, checking its shape and types but
// not its values.
func decode(name string, data []byte) (*File, *positions, error) {
	failField := func(line int, field, format string, args ...any) (*File, *positions, error) {
		return nil, nil, &Error{File: name, Line: line, Field: field, Err: because(ErrInvalidSpec, format, args...), index: -1}
	}
	fail := func(line int, format string, args ...any) (*File, *positions, error) {
		return failField(line, "", format, args...)
	}
	var root *yaml.Node
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".yaml", ".yml":
		// A decoder, not yaml.Unmarshal, which reads the first document
		// and ignores the rest: a second one's rules must not be dropped
		// silently. An empty one (a file that ends with "---") drops
		// nothing.
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		err := dec.Decode(&doc)
		for err == nil {
			var next yaml.Node
			if err = dec.Decode(&next); err == nil && !emptyDocument(&next) {
				return fail(next.Line, "a second YAML document starts here: a rules file is one document (put every rule in the first one's rules)")
			}
		}
		if err != io.EOF {
			line, msg := yamlErrorLine(err)
			return fail(line, "invalid YAML: %s", msg)
		}
		root = &doc
		if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
			root = doc.Content[0]
		}
	case ".json":
		n, err := jsonTree(data)
		if err != nil {
			return nil, nil, &Error{File: name, Line: err.line, Err: because(ErrInvalidSpec, "invalid JSON: %s", err.msg), index: -1}
		}
		root = n
	default:
		return fail(0, "unknown extension %q: want .yaml, .yml or .json", ext)
	}
	root = deref(root)
	if root == nil || root.Kind == 0 || root.Kind == yaml.DocumentNode || isNull(root) {
		return fail(0, "empty document: want a mapping with rules (\"rules: []\" for a policy without rules)")
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "the top level must be a mapping with default_plan, reject_unknown_plan and rules, got %s", kindOf(root))
	}

	f := &File{}
	pos := &positions{top: map[string]int{}}
	var rules *yaml.Node
	for k := 0; k+1 < len(root.Content); k += 2 {
		key, val := deref(root.Content[k]), deref(root.Content[k+1])
		if l, dup := pos.top[key.Value]; dup {
			return failField(key.Line, key.Value, "given twice (first on line %d)", l)
		}
		pos.top[key.Value] = key.Line
		var err error
		switch key.Value {
		case "default_plan":
			f.DefaultPlan, err = text(val)
		case "reject_unknown_plan":
			var b *bool
			if b, err = boolean(val); b != nil {
				f.RejectUnknownPlan = *b
			}
		case "rules":
			rules = val
		default:
			return fail(key.Line, "unknown field %q (want default_plan, reject_unknown_plan or rules)", key.Value)
		}
		if err != nil {
			return nil, nil, &Error{File: name, Line: val.Line, Field: key.Value, Err: err, index: -1}
		}
	}
	switch {
	case rules == nil:
		return fail(root.Line, "missing rules (write \"rules: []\" for a policy without rules)")
	case isNull(rules):
		return failField(rules.Line, "rules", "want a list of rules (\"rules: []\" for none), got null")
	case rules.Kind != yaml.SequenceNode:
		return failField(rules.Line, "rules", "want a list of rules, got %s", kindOf(rules))
	}
	for i, rn := range rules.Content {
		rn = deref(rn)
		s, lines, err := decodeSpec(i, rn)
		pos.rules = append(pos.rules, lines)
		if err != nil {
			err.File = name
			return nil, nil, err
		}
		f.Rules = append(f.Rules, s)
	}
	return f, pos, nil
}

// specFields decodes each field of a rule.
var specFields = map[string]func(s *Spec, n *yaml.Node) error{
	"name":        func(s *Spec, n *yaml.Node) (err error) { s.Name, err = text(n); return },
	"key_pattern": func(s *Spec, n *yaml.Node) (err error) { s.KeyPattern, err = text(n); return },
	"scope":       func(s *Spec, n *yaml.Node) (err error) { s.Scope, err = text(n); return },
	"algorithm":   func(s *Spec, n *yaml.Node) (err error) { s.Algorithm, err = text(n); return },
	"rate_per_second": func(s *Spec, n *yaml.Node) (err error) {
		s.RatePerSecond, err = number(n)
		return
	},
	"rate":           func(s *Spec, n *yaml.Node) (err error) { s.Rate, err = integer(n); return },
	"period":         func(s *Spec, n *yaml.Node) (err error) { s.Period, err = duration(n); return },
	"burst_capacity": func(s *Spec, n *yaml.Node) (err error) { s.BurstCapacity, err = count(n); return },
	"window":         func(s *Spec, n *yaml.Node) (err error) { s.Window, err = duration(n); return },
	"max_wait":       func(s *Spec, n *yaml.Node) (err error) { s.MaxWait, err = duration(n); return },
	"plan":           func(s *Spec, n *yaml.Node) (err error) { s.Plan, err = text(n); return },
	"is_active":      func(s *Spec, n *yaml.Node) (err error) { s.IsActive, err = boolean(n); return },
	"shadow": func(s *Spec, n *yaml.Node) error {
		b, err := boolean(n)
		s.Shadow = b != nil && *b
		return err
	},
	"description": func(s *Spec, n *yaml.Node) (err error) { s.Description, err = text(n); return },
}

// fieldList is the sorted names of specFields and routes, for errors.
var fieldList = func() string {
	names := []string{"routes"}
	for k := range specFields {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}()

// decodeSpec decodes rule i and the lines of its fields.
func decodeSpec(i int, n *yaml.Node) (Spec, map[string]int, *Error) {
	lines := map[string]int{"": n.Line}
	var s Spec
	lbl := "#" + strconv.Itoa(i)
	if n.Kind == yaml.MappingNode {
		for k := 0; k+1 < len(n.Content); k += 2 {
			if key, val := deref(n.Content[k]), deref(n.Content[k+1]); key.Value == "name" && val.Kind == yaml.ScalarNode && !isNull(val) && val.Value != "" {
				lbl = val.Value
			}
		}
	}
	fail := func(line int, field string, err error) (Spec, map[string]int, *Error) {
		return Spec{}, lines, &Error{Line: line, Rule: lbl, Field: field, Err: err, index: i}
	}
	if n.Kind != yaml.MappingNode {
		return fail(n.Line, "", because(ErrInvalidSpec, "want a mapping of fields, got %s", kindOf(n)))
	}
	for k := 0; k+1 < len(n.Content); k += 2 {
		key, val := deref(n.Content[k]), deref(n.Content[k+1])
		field := key.Value
		if l, dup := lines[field]; dup && field != "" {
			return fail(key.Line, field, because(ErrInvalidSpec, "given twice (first on line %d)", l))
		}
		lines[field] = key.Line
		if field == "routes" {
			routes, err := list(val, func(j, line int) { lines[fmt.Sprintf("routes[%d]", j)] = line })
			if err != nil {
				return fail(err.line, err.field, err.err)
			}
			s.Routes = routes
			continue
		}
		set, ok := specFields[field]
		if !ok {
			return fail(key.Line, "", because(ErrInvalidSpec, "unknown field %q (want %s)", field, fieldList))
		}
		if err := set(&s, val); err != nil {
			return fail(val.Line, field, err)
		}
	}
	return s, lines, nil
}

// deref follows YAML aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// emptyDocument reports whether n, a document after the first, holds
// nothing: "---" alone, or with comments.
func emptyDocument(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && (len(n.Content) == 0 || isNull(n.Content[0]))
}

// kindOf describes a node for errors.
func kindOf(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case isNull(n):
		return "null"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// text reads a scalar as a string; null is "".
func text(n *yaml.Node) (string, error) {
	switch {
	case isNull(n):
		return "", nil
	case n.Kind == yaml.ScalarNode:
		return n.Value, nil
	}
	return "", because(ErrInvalidSpec, "want a string, got %s", kindOf(n))
}

// integer reads an integer; null is nil. A leading zero is an error
// (leadingZero).
func integer(n *yaml.Node) (*int64, error) {
	if isNull(n) {
		return nil, nil
	}
	if err := leadingZero(n); err != nil {
		return nil, err
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		return nil, because(ErrInvalidSpec, "want an integer, got %s", kindOf(n))
	}
	return &v, nil
}

// count reads an integer; null is 0.
func count(n *yaml.Node) (int64, error) {
	v, err := integer(n)
	if v == nil {
		return 0, err
	}
	return *v, err
}

// number reads a number; null is nil. A leading zero is an error
// (leadingZero), and so is a decimal with more digits than a float64 holds:
// it would be rounded silently.
func number(n *yaml.Node) (*float64, error) {
	if isNull(n) {
		return nil, nil
	}
	if err := leadingZero(n); err != nil {
		return nil, err
	}
	var v float64
	if tag := n.ShortTag(); n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil {
		return nil, because(ErrInvalidSpec, "want a number, got %s", kindOf(n))
	}
	if lit, ok := new(big.Rat).SetString(n.Value); ok {
		short, _ := new(big.Rat).SetString(strconv.FormatFloat(v, 'f', -1, 64))
		if short != nil && lit.Cmp(short) != 0 {
			return nil, because(core.ErrInvalidRate, "%s has more digits than a float64 holds (it reads as %v); write it as rate and period", n.Value, v)
		}
	}
	return &v, nil
}

// leadingZero refuses a number written with a leading zero, such as 010:
// yaml.v3 reads it as YAML 1.1 does, as the octal 8, where a person reads
// ten. A prefix says the base plainly (0o10, 0x10, 0b10) and is read in it.
// JSON has no leading zeros.
func leadingZero(n *yaml.Node) error {
	if tag := n.ShortTag(); n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
		return nil
	}
	sign, lit := "", n.Value
	if lit != "" && (lit[0] == '+' || lit[0] == '-') {
		sign, lit = lit[:1], lit[1:]
	}
	digits := strings.ReplaceAll(lit, "_", "")
	if len(digits) < 2 || digits[0] != '0' || strings.Trim(digits, "0123456789") != "" {
		return nil
	}
	dec := strings.TrimLeft(digits, "0")
	if dec == "" {
		dec = "0"
	}
	if oct, err := strconv.ParseUint(digits, 8, 64); err == nil {
		return because(ErrInvalidSpec, "%s has a leading zero, which YAML reads as octal, %s%d: write %s%s, or %s0o%s for octal", n.Value, sign, oct, sign, dec, sign, dec)
	}
	// 08 and 09 are not octal: yaml.v3 reads them as the floats 8 and 9.
	return because(ErrInvalidSpec, "%s has a leading zero, which YAML keeps for octal: write %s%s", n.Value, sign, dec)
}

// boolean reads true or false; null is nil.
func boolean(n *yaml.Node) (*bool, error) {
	if isNull(n) {
		return nil, nil
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		return nil, because(ErrInvalidSpec, "want true or false, got %s", kindOf(n))
	}
	return &v, nil
}

// duration reads a Go duration string; null is 0.
func duration(n *yaml.Node) (Duration, error) {
	if isNull(n) {
		return 0, nil
	}
	var d Duration
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, because(ErrInvalidSpec, "want a duration such as \"1s\", \"1m\" or \"24h\", got %s", kindOf(n))
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return 0, because(ErrInvalidSpec, "want a duration such as \"1s\", \"1m\" or \"24h\", got %q", n.Value)
	}
	return d, nil
}

// listError is an error in an item of a list.
type listError struct {
	line  int
	field string
	err   error
}

// list reads a list of strings of the routes field, calling at with each
// item's position and line; null is nil.
func list(n *yaml.Node, at func(j, line int)) ([]string, *listError) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, &listError{n.Line, "routes", because(ErrInvalidSpec, "want a list of route selectors, got %s", kindOf(n))}
	}
	var out []string
	for j, item := range n.Content {
		item = deref(item)
		at(j, item.Line)
		if item.Kind != yaml.ScalarNode || isNull(item) {
			return nil, &listError{item.Line, fmt.Sprintf("routes[%d]", j), because(ErrInvalidSpec, "want a route selector, got %s", kindOf(item))}
		}
		out = append(out, item.Value)
	}
	return out, nil
}

var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

// yamlErrorLine finds the line in a YAML error, and the message after it.
func yamlErrorLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		l, _ := strconv.Atoi(m[1])
		return l, m[2]
	}
	return 0, msg
}

// jsonError is a JSON syntax error at a line.
type jsonError struct {
	line int
	msg  string
}

// jsonTree reads a JSON document into the node tree YAML documents
// decode into, with the line of each value, so that both formats share
// one decoder. Numbers keep their text; strings are tagged !!str, so
// that a quoted number is not an integer.
func jsonTree(data []byte) (*yaml.Node, *jsonError) {
	var nl []int // offsets of '\n'
	for i, c := range data {
		if c == '\n' {
			nl = append(nl, i)
		}
	}
	lineAt := func(off int64) int { return 1 + sort.SearchInts(nl, int(off)) }
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	fail := func(err error) *jsonError {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &jsonError{lineAt(se.Offset), se.Error()}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &jsonError{lineAt(int64(len(data))), "unexpected end of input"}
		}
		return &jsonError{lineAt(dec.InputOffset()), err.Error()}
	}
	// next returns the line of the next token: the decoder's offset is the
	// end of the previous one, before any separator.
	next := func() int {
		off := dec.InputOffset()
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n,:", data[off]) >= 0 {
			off++
		}
		return lineAt(off)
	}
	var value func() (*yaml.Node, *jsonError)
	value = func() (*yaml.Node, *jsonError) {
		line := next()
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		n := &yaml.Node{Kind: yaml.ScalarNode, Line: line}
		switch t := tok.(type) {
		case json.Delim:
			n.Kind = yaml.MappingNode
			if t == '[' {
				n.Kind = yaml.SequenceNode
			}
			for dec.More() {
				if n.Kind == yaml.MappingNode {
					k, err := value() // a string: the decoder refuses any other key
					if err != nil {
						return nil, err
					}
					n.Content = append(n.Content, k)
				}
				v, err := value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return nil, fail(err)
			}
		case string:
			n.Tag, n.Value, n.Style = "!!str", t, yaml.DoubleQuotedStyle
		case json.Number:
			n.Tag, n.Value = "!!float", string(t)
			if _, err := strconv.ParseInt(string(t), 10, 64); err == nil {
				n.Tag = "!!int"
			}
		case bool:
			n.Tag, n.Value = "!!bool", strconv.FormatBool(t)
		case nil:
			n.Tag, n.Value = "!!null", "null"
		}
		return n, nil
	}
	root, jerr := value()
	if jerr != nil {
		return nil, jerr
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fail(err)
		}
		return nil, &jsonError{lineAt(dec.InputOffset()), fmt.Sprintf("data after the document: %v", tok)}
	}
	return root, nil
}
