module github.com/bucketry/ratelimit/keyfuncs

go 1.26.0

require github.com/bucketry/ratelimit/core v0.1.0
