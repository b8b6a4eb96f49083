module github.com/bucketry/ratelimit/benchmarks/loadtest

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/internal/proctest v0.1.0
	github.com/bucketry/ratelimit/internal/redistest v0.1.0
	github.com/bucketry/ratelimit/rules v0.1.0
	github.com/tsenart/vegeta/v12 v12.13.0
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.27.0 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/sys v0.22.0 // indirect
	golang.org/x/text v0.16.0 // indirect
)
