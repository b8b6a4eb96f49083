module github.com/bucketry/ratelimit/adapters/rueidis

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/internal/redisscript v0.1.0
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.47.0 // indirect
