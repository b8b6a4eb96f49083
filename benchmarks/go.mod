module github.com/bucketry/ratelimit/benchmarks

go 1.26.0

replace (
	github.com/bucketry/ratelimit/adapters/goredis => ../adapters/goredis
	github.com/bucketry/ratelimit/adapters/rueidis => ../adapters/rueidis
	github.com/bucketry/ratelimit/conformance => ../conformance
	github.com/bucketry/ratelimit/core => ../core
	github.com/bucketry/ratelimit/internal/redisscript => ../internal/redisscript
	github.com/bucketry/ratelimit/internal/redistest => ../internal/redistest
	github.com/bucketry/ratelimit/keyfuncs => ../keyfuncs
)

require (
	github.com/bucketry/ratelimit/adapters/goredis v0.0.0
	github.com/bucketry/ratelimit/adapters/rueidis v0.0.0
	github.com/bucketry/ratelimit/core v0.0.0
	github.com/bucketry/ratelimit/internal/redisscript v0.0.0
	github.com/bucketry/ratelimit/internal/redistest v0.0.0
	github.com/didip/tollbooth/v7 v7.0.2
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/sethvargo/go-limiter v0.7.1
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
	golang.org/x/time v0.16.0
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/bucketry/ratelimit/keyfuncs v0.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-pkgz/expirable-cache/v3 v3.0.0 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/mock v0.6.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

tool golang.org/x/perf/cmd/benchstat
