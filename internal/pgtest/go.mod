module github.com/bucketry/ratelimit/internal/pgtest

go 1.26.0

require github.com/bucketry/ratelimit/internal/proctest v0.1.0
