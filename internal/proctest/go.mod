module github.com/bucketry/ratelimit/internal/proctest

go 1.25
