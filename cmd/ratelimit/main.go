package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
	"github.com/redis/go-redis/v9"
)

const usage = `usage:
  ratelimit validate FILE...
  ratelimit inspect -redis ADDR [-prefix P] [-secret-file F] -rules FILE -rule NAME [-plan PLAN] -key ID
  ratelimit reset   -redis ADDR [-prefix P] [-secret-file F] -rules FILE -rule NAME [-plan PLAN] -key ID

validate  parses each rules file (.yaml, .yml, .json) and prints its rules as compiled
inspect   reads a bucket in Redis without consuming: remaining tokens and time to full
reset     deletes a bucket in Redis, which is then full

A store made with WithHashedIdentities keys each bucket by an HMAC of the identity. Give
inspect and reset its secret: the bytes of the file -secret-file names (a final newline is
part of them), or the value of ` + secretEnv + `; never a flag's value, which
others can see. Without it they read and delete a key with the identity in clear, which the
limiter does not use, and report a full bucket.

Exit status: 0 on success, 1 when a file is invalid or Redis fails, 2 for a usage error.
`

// secretEnv is the environment variable that may hold the secret of a
// store that hashes identities (goredis.WithHashedIdentities).
const secretEnv = "RATELIMIT_IDENTITY_SECRET"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error in the command line.
var errUsage = errors.New("usage")

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "validate":
		err = validate(args[1:], stdout, stderr)
	case "inspect", "reset":
		err = bucketCommand(ctx, args[0], args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "ratelimit: %v\n%s", strings.TrimPrefix(err.Error(), "usage: "), usage)
		return 2
	default:
		fmt.Fprintf(stderr, "ratelimit: %v\n", err)
		return 1
	}
}

// validate loads each file and prints its rules; every bad file is
// reported, and the error returned names how many were.
func validate(files []string, stdout, stderr io.Writer) error {
	if len(files) == 0 {
		return fmt.Errorf("%w: validate: no file given", errUsage)
	}
	bad := 0
	for _, f := range files {
		p, err := rules.Load(f)
		if err != nil {
			fmt.Fprintln(stderr, err)
			bad++
			continue
		}
		printPolicy(stdout, f, p)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d files invalid", bad, len(files))
	}
	return nil
}

// printPolicy writes the compiled rules of file as a table.
func printPolicy(w io.Writer, file string, p *core.Policy) {
	rs := p.Rules()
	plans := p.Plans()
	fmt.Fprintf(w, "%s: %d rules", file, len(rs))
	if plans.Default != "" {
		fmt.Fprintf(w, ", default plan %q", plans.Default)
	}
	if plans.RejectUnknown {
		fmt.Fprint(w, ", unknown plans rejected")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tLIMIT\tPLAN\tROUTES\tSHADOW\tACTIVE")
	for _, r := range rs {
		plan, routes := r.Plan, strings.Join(r.Routes, ", ")
		if plan == "" {
			plan = "*"
		}
		if routes == "" {
			routes = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%v\t%v\n", r.Name, r.Scope, r.Limit, plan, routes, r.Shadow, !r.Disabled)
	}
	tw.Flush()
}

// bucketCommand runs inspect or reset.
func bucketCommand(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "Redis address host:port; several, comma-separated, for a Cluster")
	prefix := fs.String("prefix", "", `key prefix of the store (default: the store's, "ratelimit")`)
	file := fs.String("rules", "", "the rules file (.yaml, .yml, .json) that names the rule")
	name := fs.String("rule", "", "the rule's name")
	plan := fs.String("plan", "", "the rule's plan, when rules of that name exist for several plans")
	key := fs.String("key", "", `the identity: a user id, an IP, an endpoint, a dimension's value; "*" for a global rule (the default for one)`)
	secretFile := fs.String("secret-file", "", "a file whose bytes, exactly, are the secret of a store made with WithHashedIdentities (or set $"+secretEnv+")")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on the Redis call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", errUsage, cmd, err)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"-redis", *addr}, {"-rules", *file}, {"-rule", *name}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s: missing %s", errUsage, cmd, strings.Join(missing, ", "))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected arguments %q", errUsage, cmd, fs.Args())
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: %s: -timeout must be > 0, got %v", errUsage, cmd, *timeout)
	}

	p, err := rules.Load(*file)
	if err != nil {
		return err
	}
	rule, err := findRule(p, *name, *plan)
	if err != nil {
		return err
	}
	id := *key
	if id == "" {
		if rule.Scope != core.ScopeGlobal {
			return fmt.Errorf("%w: %s: missing -key (rule %q counts per %s)", errUsage, cmd, rule.Name, rule.Scope)
		}
		id = "*" // the identity of a global rule's one bucket
	}
	if err := core.CheckKey(id); err != nil {
		return fmt.Errorf("-key: %w", err)
	}

	opts := []goredis.Option{goredis.WithTimeout(*timeout)}
	if *prefix != "" {
		opts = append(opts, goredis.WithPrefix(*prefix))
	}
	secret, hashed, err := identitySecret(cmd, *secretFile)
	if err != nil {
		return err
	}
	if hashed {
		opts = append(opts, goredis.WithHashedIdentities(secret))
	}
	store, err := goredis.Open(&redis.UniversalOptions{Addrs: strings.Split(*addr, ",")}, opts...)
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if cmd == "reset" {
		if err := store.Reset(ctx, rule.Name, id); err != nil {
			return fmt.Errorf("reset %s: %w", store.Key(rule.Name, id), err)
		}
		fmt.Fprintf(stdout, "reset %s: rule %s, key %s: the bucket is full\n", store.Key(rule.Name, id), rule.Name, id)
		return nil
	}
	// A take of cost 0 reads the bucket and changes nothing.
	t := &core.Take{
		Cost:    0,
		Buckets: []core.Bucket{{Rule: rule.Name, Key: id, Limit: &rule.Limit}},
		States:  make([]core.BucketState, 1),
	}
	if err := store.Take(ctx, t); err != nil {
		return fmt.Errorf("inspect %s: %w", store.Key(rule.Name, id), err)
	}
	s := t.States[0]
	fmt.Fprintf(stdout, "rule:      %s (%s, %v)\n", rule.Name, rule.Scope, rule.Limit)
	fmt.Fprintf(stdout, "key:       %s\n", id)
	fmt.Fprintf(stdout, "redis key: %s\n", store.Key(rule.Name, id))
	fmt.Fprintf(stdout, "remaining: %d of %d\n", s.Remaining, rule.Limit.Burst())
	fmt.Fprintf(stdout, "reset in:  %v\n", s.ResetAfter)
	fmt.Fprintf(stdout, "at:        %s\n", t.At.UTC().Format(time.RFC3339Nano))
	return nil
}

// identitySecret returns the secret of a store that hashes identities:
// the bytes of file when given, else the value of secretEnv when set and
// not empty; hashed is false when neither is. The secret is never a flag's
// value, which ps and shell histories show.
func identitySecret(cmd, file string) (secret []byte, hashed bool, err error) {
	env := os.Getenv(secretEnv)
	switch {
	case file != "" && env != "":
		return nil, false, fmt.Errorf("%w: %s: -secret-file and %s both give the identity secret: give one", errUsage, cmd, secretEnv)
	case file != "":
		secret, err = os.ReadFile(file)
		if err != nil {
			return nil, false, fmt.Errorf("-secret-file: %w", err)
		}
		return secret, true, nil
	case env != "":
		return []byte(env), true, nil
	}
	return nil, false, nil
}

// findRule returns the rule of p named name, of plan plan when given.
func findRule(p *core.Policy, name, plan string) (core.Rule, error) {
	var found []core.Rule
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
		if r.Name == name && (plan == "" || r.Plan == plan) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		if plan != "" {
			return core.Rule{}, fmt.Errorf("%w: no rule %q for plan %q (the rules are %q)", errUsage, name, plan, names)
		}
		return core.Rule{}, fmt.Errorf("%w: no rule %q (the rules are %q)", errUsage, name, names)
	case 1:
		return found[0], nil
	}
	var plans []string
	for _, r := range found {
		plans = append(plans, r.Plan)
	}
	return core.Rule{}, fmt.Errorf("%w: rule %q exists for plans %q: give -plan", errUsage, name, plans)
}
