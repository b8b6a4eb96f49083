module github.com/bucketry/ratelimit/internal/redistest

go 1.25
