module github.com/bucketry/ratelimit

go 1.25
