module github.com/bucketry/ratelimit/cmd/ratelimit

go 1.26.0

require (
	github.com/bucketry/ratelimit/adapters/goredis v0.1.0
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/rules v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/bucketry/ratelimit/internal/redisscript v0.1.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
