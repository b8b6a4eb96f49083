package redistest

import (
	"errors"
	"fmt"
	"strings"
)

// WithACLUser gives every server that holds data an ACL user, name with
// password, that may do exactly what rules allow: the user is created
// from `reset on >password rules...` (`nopass` instead of `>password` for
// an empty password), so it starts with no commands, keys or channels.
// The rules are ACL SETUSER rules, one per argument: WithACLUser("app",
// "secret", "~app:*", "+get", "+set"). The user is defined on the command
// line (--user), so a restarted server has it again, and every node of a
// Cluster has it. An invalid rule makes the server fail to start, with
// Redis's reason in the error. The harness's own connections ([Server.Do],
// the readiness checks) keep using the unrestricted default user; name
// must not be "default". Give the option once per user.
func WithACLUser(name, password string, rules ...string) Option {
	return optionFunc(func(c *config) {
		c.users = append(c.users, aclUser{name: name, password: password, rules: rules})
	})
}

// aclUser is one WithACLUser.
type aclUser struct {
	name, password string
	rules          []string
}

// check reports what makes u unusable, naming the option.
func (u aclUser) check(seen map[string]bool) error {
	switch {
	case u.name == "":
		return errors.New("redistest: WithACLUser: name must not be empty")
	case u.name == "default":
		return errors.New(`redistest: WithACLUser: name must not be "default", the harness's own user`)
	case strings.ContainsFunc(u.name, isSpaceOrControl):
		return fmt.Errorf("redistest: WithACLUser(%q): name must not contain spaces or control characters", u.name)
	case seen[u.name]:
		return fmt.Errorf("redistest: WithACLUser(%q): user given twice", u.name)
	}
	for _, r := range u.rules {
		// A rule starting with "--" would start a new directive on the
		// command line; an empty one would be a rule Redis refuses anyway.
		if r == "" || strings.HasPrefix(r, "--") || strings.ContainsFunc(r, isSpaceOrControl) {
			return fmt.Errorf("redistest: WithACLUser(%q): rule %q must be one non-empty word not starting with --", u.name, r)
		}
	}
	return nil
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// args is the --user directive that defines u: redis-server turns it into
// the configuration line `user name reset on >password rules...`, quoting
// each value.
func (u aclUser) args() []string {
	pass := "nopass"
	if u.password != "" {
		pass = ">" + u.password
	}
	return append([]string{"--user", u.name, "reset", "on", pass}, u.rules...)
}
