module github.com/bucketry/ratelimit/adapters/test

go 1.26.0

require (
	github.com/bucketry/ratelimit/adapters/goredis v0.1.0
	github.com/bucketry/ratelimit/adapters/rueidis v0.1.0
	github.com/bucketry/ratelimit/conformance v0.1.0
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/internal/redisscript v0.1.0
	github.com/bucketry/ratelimit/internal/redistest v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/bucketry/ratelimit/flow v0.1.0 // indirect
	github.com/bucketry/ratelimit/internal/proctest v0.1.0 // indirect
	github.com/bucketry/ratelimit/keyfuncs v0.1.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/mock v0.6.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
