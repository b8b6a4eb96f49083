module github.com/bucketry/ratelimit/adapters/postgres/test

go 1.26.0

require (
	github.com/bucketry/ratelimit/adapters/postgres v0.1.0
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/internal/pgtest v0.1.0
	github.com/bucketry/ratelimit/nethttp v0.1.0
	github.com/bucketry/ratelimit/rules v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/bucketry/ratelimit/flow v0.1.0 // indirect
	github.com/bucketry/ratelimit/internal/proctest v0.1.0 // indirect
	github.com/bucketry/ratelimit/keyfuncs v0.1.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
