package pgtest

import (
	"fmt"
	"regexp"
	"time"
)

// Option changes how a server is started. With no options a server has
// the database "test", a 30s start timeout and only the harness's own
// settings.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	database     string
	startTimeout time.Duration
	settings     []setting
}

// setting is one WithSetting.
type setting struct{ name, value string }

// identifier is what the harness accepts as a database or setting name, so
// that it never has to quote one.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// settingName is a setting name, plain or of an extension ("auto_explain.log_min_duration").
var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

func newConfig(opts []Option) (*config, error) {
	c := &config{database: "test", startTimeout: 30 * time.Second}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("pgtest: option %d is nil", i)
		}
		o.apply(c)
	}
	if !identifier.MatchString(c.database) {
		return nil, fmt.Errorf("pgtest: WithDatabase: name must match %s, got %q", identifier, c.database)
	}
	if c.database == "postgres" || c.database == "template0" || c.database == "template1" {
		return nil, fmt.Errorf("pgtest: WithDatabase: %q exists already; name another database", c.database)
	}
	if c.startTimeout <= 0 {
		return nil, fmt.Errorf("pgtest: WithStartTimeout: timeout must be > 0, got %v", c.startTimeout)
	}
	for _, s := range c.settings {
		if !settingName.MatchString(s.name) {
			return nil, fmt.Errorf("pgtest: WithSetting(%q): name must be a PostgreSQL setting name", s.name)
		}
	}
	return c, nil
}

// WithDatabase names the database Start creates and URL points at ("test"
// by default): 1 to 63 characters of [a-z0-9_], not starting with a digit,
// and not one initdb makes (postgres, template0, template1).
func WithDatabase(name string) Option {
	return optionFunc(func(c *config) { c.database = name })
}

// WithStartTimeout bounds how long starting waits for initdb and for the
// server to accept connections (30s by default). It also bounds
// [Server.Restart].
func WithStartTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.startTimeout = d })
}

// WithSetting passes a server setting on the command line (-c name=value),
// after the harness's own, so it can override them:
// WithSetting("max_connections", "20"). An invalid value makes the server
// fail to start, with PostgreSQL's reason in the error. Give the option once
// per setting.
func WithSetting(name, value string) Option {
	return optionFunc(func(c *config) { c.settings = append(c.settings, setting{name, value}) })
}
