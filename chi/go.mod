module github.com/bucketry/ratelimit/chi

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/flow v0.1.0
	github.com/bucketry/ratelimit/keyfuncs v0.1.0
	github.com/go-chi/chi/v5 v5.5.0
)
