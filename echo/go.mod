module github.com/bucketry/ratelimit/echo

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/flow v0.1.0
	github.com/bucketry/ratelimit/keyfuncs v0.1.0
	github.com/labstack/echo/v4 v4.16.0
)

require (
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)
