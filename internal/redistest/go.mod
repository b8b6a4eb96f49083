module github.com/bucketry/ratelimit/internal/redistest

go 1.25

require github.com/bucketry/ratelimit/internal/proctest v0.1.0
