// Command operations is a service wired for operations: its rules in
// PostgreSQL (the RateLimitRule table, reloaded on every change) or in a
// watched YAML/JSON file; its violations written to PostgreSQL
// (RateLimitViolation); Prometheus metrics and the bucket admin handler on an
// operator's port; logs through slog; buckets in Redis or in memory.
//
//	go run ./examples/operations -rules limits.yaml                          # memory, rules from a file
//	go run ./examples/operations -postgres "$DATABASE_URL" -redis localhost:6379
//
//	curl -i -H 'X-User: ann' 'localhost:8080/search?q=go'
//	curl -s localhost:9090/metrics | grep rate_limiter_
//	curl -s 'localhost:9090/ratelimit/buckets?user=ann'                     # inspect
//	curl -s -X DELETE 'localhost:9090/ratelimit/buckets?user=ann'           # reset
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
	"github.com/bucketry/ratelimit/rules"
)

// config is the command line.
type config struct {
	Addr        string // the API
	AdminAddr   string // /metrics and /ratelimit/buckets, for operators only
	Rules       string // a rules file, watched; without Postgres, or its fallback at start
	Postgres    string // rules and the audit log in this database
	Redis       string // buckets in this Redis; empty: in memory
	DefaultPlan string // the plan of requests without a known one
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Addr, "addr", "localhost:8080", "API listen `address`")
	flag.StringVar(&cfg.AdminAddr, "admin", "localhost:9090", "operator listen `address`: /metrics, /ratelimit/buckets")
	flag.StringVar(&cfg.Rules, "rules", "", "rules `file` (YAML or JSON), watched; with -postgres, used only if the database is down at start")
	flag.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL `URL`: rules from RateLimitRule, violations to RateLimitViolation")
	flag.StringVar(&cfg.Redis, "redis", "", "Redis `address`; empty: buckets in memory")
	flag.StringVar(&cfg.DefaultPlan, "default-plan", "free", "the `plan` of requests whose plan no rule names")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc, err := start(ctx, cfg, logger)
	if err != nil {
		logger.Error("start", "err", err)
		os.Exit(1)
	}
	logger.Info("serving", "api", svc.APIAddr, "admin", svc.AdminAddr)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Close(shutdown); err != nil {
		logger.Error("shutdown", "err", err)
		os.Exit(1)
	}
}

// service is the running service.
type service struct {
	APIAddr, AdminAddr string // where it listens

	closers []func(context.Context) error // in the order to run them
}

// Close stops serving, then flushes the audit log and closes the rules
// source, the database pool and the store, and returns every error.
func (s *service) Close(ctx context.Context) error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c(ctx))
	}
	return errors.Join(errs...)
}

// start builds the service from cfg and serves it until Close.
func start(ctx context.Context, cfg config, logger *slog.Logger) (svc *service, err error) {
	svc = &service{}
	var late []func(context.Context) error // what Close runs after the servers stop, last made first
	defer func() {
		if err != nil {
			svc.closers = append(svc.closers, late...)
			svc.Close(context.Background())
		}
	}()
	closeLater := func(fn func(context.Context) error) { late = append([]func(context.Context) error{fn}, late...) }

	// Buckets: Redis shared by every instance, or this process's memory.
	var store interface {
		core.Store
		core.MetricSource
	}
	if cfg.Redis != "" {
		rs, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{cfg.Redis}},
			goredis.WithBreaker(3, time.Second), goredis.WithLogger(logger))
		if err != nil {
			return nil, err
		}
		closeLater(func(context.Context) error { return rs.Close() })
		store = rs
	} else {
		ms, err := core.NewMemoryStore()
		if err != nil {
			return nil, err
		}
		store = ms
	}

	// Violations to PostgreSQL, from a queue that never blocks a request.
	var (
		pool    *pgxpool.Pool
		source  atomic.Pointer[pglimit.Source]
		sources = []core.MetricSource{store}
		opts    = []core.Option{core.WithStore(store), core.WithLogger(logger)}
	)
	if cfg.Postgres != "" {
		if pool, err = pgxpool.New(ctx, cfg.Postgres); err != nil {
			return nil, err
		}
		closeLater(func(context.Context) error { pool.Close(); return nil })
		if err := pglimit.Migrate(ctx, pool); err != nil {
			return nil, err
		}
		audit, err := pglimit.NewAudit(pool, pglimit.WithAuditLogger(logger), pglimit.WithPerBucketInterval(time.Second),
			pglimit.WithRuleIDs(func(rule, plan string) (int64, bool) {
				if s := source.Load(); s != nil {
					return s.RuleID(rule, plan)
				}
				return 0, false
			}))
		if err != nil {
			return nil, err
		}
		closeLater(audit.Close)
		sources = append(sources, audit)
		opts = append(opts, audit.Option())
	}

	// Metrics: the seed's series and the components' own. The rules
	// source needs the limiter, which needs the metrics' observer: it
	// joins the sources once made.
	var rulesSource lateSource
	sources = append(sources, &rulesSource)
	metrics, err := promlimit.New(promlimit.WithSources(sources...))
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	opts = append(opts, metrics.Option())

	// The limiter starts with no rule; the rules source fills it in.
	empty, err := core.NewPolicy()
	if err != nil {
		return nil, err
	}
	limiter, err := core.NewLimiter(empty, opts...)
	if err != nil {
		return nil, err
	}
	user, err := keyfuncs.Header("X-User")
	if err != nil {
		return nil, err
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		return nil, err
	}
	ip, err := keyfuncs.ClientIP() // the peer address: no proxy is trusted here
	if err != nil {
		return nil, err
	}
	rl, err := nethttp.New(limiter, flow.WithKey(core.ScopeUser, user), flow.WithKey(core.ScopeIP, ip), flow.WithPlan(plan))
	if err != nil {
		return nil, err
	}

	// Rules: the table, reloaded on NOTIFY (and every 30s); or the file.
	plans := core.Plans{Default: cfg.DefaultPlan}
	if pool != nil {
		srcOpts := []pglimit.Option{pglimit.WithLogger(logger), pglimit.WithPlans(plans)}
		if cfg.Rules != "" {
			srcOpts = append(srcOpts, pglimit.WithFallbackFile(cfg.Rules))
		}
		src, err := pglimit.NewSource(ctx, pool, limiter, srcOpts...)
		if err != nil {
			return nil, err
		}
		source.Store(src)
		closeLater(func(context.Context) error { return src.Close() })
		rulesSource.set(src)
	} else {
		if cfg.Rules == "" {
			return nil, errors.New("operations: no rules: give -rules FILE or -postgres URL")
		}
		w, err := rules.Watch(cfg.Rules, limiter, rules.WithLogger(logger))
		if err != nil {
			return nil, err
		}
		closeLater(func(context.Context) error { return w.Close() })
		rulesSource.set(w)
	}
	if err := registry.Register(metrics); err != nil {
		return nil, err
	}

	api := http.NewServeMux()
	api.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %s\n", r.URL.Query().Get("q"))
	})
	api.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})
	admin, err := nethttp.NewAdmin(limiter)
	if err != nil {
		return nil, err
	}
	ops := http.NewServeMux()
	ops.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	ops.Handle("/ratelimit/buckets", admin)

	if svc.APIAddr, err = serve(svc, logger, cfg.Addr, rl.Handler(api)); err != nil {
		return nil, err
	}
	if svc.AdminAddr, err = serve(svc, logger, cfg.AdminAddr, ops); err != nil {
		return nil, err
	}
	svc.closers = append(svc.closers, late...)
	return svc, nil
}

// lateSource is a metric source made after the metrics: it reports
// nothing until set.
type lateSource struct {
	src atomic.Pointer[core.MetricSource]
}

func (l *lateSource) set(s core.MetricSource) { l.src.Store(&s) }

// CollectMetrics implements core.MetricSource.
func (l *lateSource) CollectMetrics(emit func(core.Metric)) {
	if s := l.src.Load(); s != nil {
		(*s).CollectMetrics(emit)
	}
}

// serve serves h on addr until Close, and returns the address it listens on.
func serve(svc *service, logger *slog.Logger, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go srv.Serve(ln)
	svc.closers = append(svc.closers, srv.Shutdown)
	return ln.Addr().String(), nil
}
