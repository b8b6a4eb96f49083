module github.com/bucketry/ratelimit/internal/redisscript

go 1.25

require github.com/bucketry/ratelimit/core v0.1.0
