module github.com/bucketry/ratelimit/rules

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/fsnotify/fsnotify v1.10.1
	go.yaml.in/yaml/v3 v3.0.6
)

require golang.org/x/sys v0.13.0 // indirect
