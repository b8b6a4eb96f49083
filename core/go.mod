module github.com/bucketry/ratelimit/core

go 1.25
