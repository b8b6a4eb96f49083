package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// admissionRow is one line of the admission test's output.
type admissionRow struct {
	store, impl                       string
	limit, attempts, admitted, errors int64
	elapsed                           string
	refill                            bool
}

// readAdmission reads the "admission: key=value ..." lines that
// TestAdmission* logs (go test -v output).
func readAdmission(r io.Reader) ([]admissionRow, error) {
	var rows []admissionRow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		_, rest, ok := strings.Cut(sc.Text(), "admission: ")
		if !ok {
			continue
		}
		var row admissionRow
		for f := range strings.FieldsSeq(rest) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("report: admission line %q: field %q is not key=value", sc.Text(), f)
			}
			var err error
			switch k {
			case "store":
				row.store = v
			case "impl":
				row.impl = v
			case "limit":
				row.limit, err = strconv.ParseInt(v, 10, 64)
			case "attempts":
				row.attempts, err = strconv.ParseInt(v, 10, 64)
			case "admitted":
				row.admitted, err = strconv.ParseInt(v, 10, 64)
			case "errors":
				row.errors, err = strconv.ParseInt(v, 10, 64)
			case "elapsed":
				row.elapsed = v
			case "refill":
				row.refill, err = strconv.ParseBool(v)
			}
			if err != nil {
				return nil, fmt.Errorf("report: admission line %q: %s: %w", sc.Text(), k, err)
			}
		}
		if row.store == "" || row.impl == "" || row.limit == 0 {
			return nil, fmt.Errorf("report: admission line %q: store, impl or limit missing", sc.Text())
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}
