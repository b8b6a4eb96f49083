package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// redisStats is what a run reads from a redis-server's INFO, before and
// after: CPU time and commands processed.
type redisStats struct {
	cpu      time.Duration // used_cpu_sys + used_cpu_user
	commands int64         // total_commands_processed: those scripts run count too
	scripts  int64         // script calls: EVALSHA, EVAL, FCALL and their _RO forms
}

// readRedis reads the statistics of every server and adds them up.
func readRedis(servers []*redistest.Server) (redisStats, error) {
	var sum redisStats
	for _, s := range servers {
		v, err := s.Do("INFO", "all")
		if err != nil {
			return sum, fmt.Errorf("loadtest: %s: INFO: %w", s.Addr, err)
		}
		text, ok := v.(string)
		if !ok {
			return sum, fmt.Errorf("loadtest: %s: INFO answered %T", s.Addr, v)
		}
		st, err := parseInfo(text)
		if err != nil {
			return sum, fmt.Errorf("loadtest: %s: %w", s.Addr, err)
		}
		sum.cpu += st.cpu
		sum.commands += st.commands
		sum.scripts += st.scripts
	}
	return sum, nil
}

// parseInfo reads used_cpu_sys, used_cpu_user, total_commands_processed
// and the script calls of commandstats from INFO's text.
func parseInfo(text string) (redisStats, error) {
	var st redisStats
	found := 0
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return st, fmt.Errorf("INFO %s: %q", k, v)
			}
			st.cpu += time.Duration(f * float64(time.Second))
			found++
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_fcall_ro":
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil || !strings.HasPrefix(v, "calls=") {
				return st, fmt.Errorf("INFO %s: %q", k, v)
			}
			st.scripts += n
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return st, fmt.Errorf("INFO %s: %q", k, v)
			}
			st.commands = n
			found++
		}
	}
	if found != 3 {
		return st, errors.New("INFO lacks used_cpu_sys, used_cpu_user or total_commands_processed")
	}
	return st, nil
}

// flush empties every server: a run starts with every bucket full.
func flush(servers []*redistest.Server) error {
	for _, s := range servers {
		if _, err := s.Do("FLUSHALL"); err != nil {
			return fmt.Errorf("loadtest: %s: FLUSHALL: %w", s.Addr, err)
		}
	}
	return nil
}
