// Command release checks that the modules of the working tree install and
// work as a user outside the workspace gets them, and converts the go.mod
// files to a release layout. It is the tool behind make release-check and
// make tidy, which run it outside the workspace (its own module needs only
// golang.org/x/mod), so that it works even when the workspace does not load:
//
//	cd internal/release && GOWORK=off go run . check -root ../.. -version v0.1.0
//	cd internal/release && GOWORK=off go run . tidy -root ../.. -version v0.1.0
//
// Flags: -root DIR (the workspace; default: the directory of go env GOWORK),
// -go CMD (the go command), -j N (check: consumers built at a time, 2),
// -keep (keep the temporary proxy, module cache and consumers).
//
// # The release layout
//
// Every module requires the modules of the project it uses at one release
// version (v0.1.0, tagged <dir>/v0.1.0), with no replace directive; go.work
// alone points development at the local copies: it uses every module and
// replaces each at the release version by its directory
// ("replace github.com/bucketry/ratelimit/core v0.1.0 => ./core"). Without
// that replace the go command reads core@v0.1.0's go.mod from a proxy even
// in the workspace, and nothing loads before the version is published. For
// the same reason go mod tidy run by hand in a module fails before then:
// make tidy runs it against a proxy of the working tree.
//
// The modules are listed in workspace.go: libraryDirs are the libraries
// that users require; toolDirs, and any module in a directory whose name
// ends in test or tests, are test and tool modules, which no library may
// require. A module in neither fails the check until it is classified.
//
// # check
//
// check -version V fails (exit status 1) on any of these, and prints each
// problem naming its file, then a summary line:
//
//  1. The graph, from go.work and the go.mod files: go.work lacks the
//     replace of a module that a module requires at V; a library requires a
//     project module at another version than V, or one that is not a library of the
//     workspace (a test or tool module); has a replace directive; or
//     requires a third-party module that only another library may require
//     (google.golang.org/grpc: grpcinterceptor; gofiber: fiber; gin: gin;
//     rueidis: adapters/rueidis; go-redis: adapters/goredis; go.uber.org/mock:
//     none).
//  2. The README: each `go get github.com/bucketry/ratelimit/...@X` line
//     names a library users may import, at V; the README says "Go 1.N", the
//     newest go directive of the libraries; the quick start markers are well
//     formed.
//  3. Consumers: every module of go.work is written at V into a file-system
//     module proxy in a temporary directory (<path>/@v/list, V.info, V.mod,
//     V.zip; the zip made by golang.org/x/mod/zip, which leaves nested
//     modules out). Fresh consumer modules then run the go command with
//     GOWORK=off, GOTOOLCHAIN=local, GOFLAGS=-mod=mod,
//     GONOSUMDB=github.com/bucketry/ratelimit,
//     GOPROXY=file://<proxy>,file://<GOMODCACHE>/cache/download,<GOPROXY> (so
//     third-party modules already downloaded are not downloaded again) and a
//     fresh GOMODCACHE (a module cache keeps a version for good, so a reused
//     one would serve an earlier copy of V; go clean -modcache empties it at
//     the end). At most -j consumers are built at a time:
//     - per library: go get <module>@V, then build a program that imports
//     each of its packages (a module of internal packages only is built as
//     a dependency);
//     - per README quick start: the program exactly as printed, go get of
//     each project module it imports at V, go mod tidy, go build, then run
//     it (see Quick starts);
//     - the module graph (go list -m all, go mod graph) of a gin + goredis
//     consumer and of a net/http one, both printed: gRPC, fiber, rueidis,
//     go.uber.org/mock, the net/http one also go-redis and gin, and any test
//     or tool module of the project fail the check when a module of ours
//     brings them in. One that is in the graph only because a third-party
//     module requires it (gin-gonic/gin v1.12.0 and quic-go require
//     go.uber.org/mock in their go.mod) is printed as a note: no change of
//     ours can remove it, and only its go.mod is downloaded.
//
// # Quick starts
//
// A quick start is a complete package main in a ```go block of README.md,
// immediately preceded by a marker line, which GitHub does not show:
//
//	<!-- quickstart: NAME METHOD TARGET -->
//
// NAME names it in messages ("gin", "net/http"). For an HTTP server, METHOD
// is the request method and TARGET the path: "<!-- quickstart: gin GET
// /hello -->". For a gRPC server, METHOD is grpc and TARGET the full method
// of a unary call that takes an empty request message: "<!-- quickstart:
// grpc grpc /grpc.health.v1.Health/Check -->".
//
// The program must listen on the address in the environment variable ADDR
// (the check passes a free loopback port; cmp.Or(os.Getenv("ADDR"),
// "localhost:8080") keeps a default for readers). One that imports a Redis
// store (adapters/goredis, adapters/rueidis) gets REDIS_ADDR, the address
// of a redis-server the check starts on a free loopback port and stops by
// its PID. Once the program accepts connections:
//
//   - HTTP: the first request must get 200, and a 429 with a Retry-After
//     field and Content-Type application/problem+json must follow within
//     100 requests, every request before it getting 200;
//   - gRPC: the first call must succeed, and a call must end with
//     ResourceExhausted within 100 calls, every call before it succeeding.
//
// The program is killed at the end. A quick start has no other copy: it is
// tested as printed.
//
// # tidy
//
// tidy -version V converts the workspace: in every module of go.work it
// requires the project's modules at V and drops replace directives of
// project modules; replaces every module of go.work at V by its directory
// in go.work (dropping go.work's earlier replaces of them); writes every
// module into a file proxy as check does;
// runs go mod tidy in each module, each after the modules it requires
// (writing each into the proxy again once tidied, so that those after it
// read its tidied go.mod), in the environment of check; and removes the
// lines of the project's modules from every go.sum (their hashes would go
// stale as the tree changes; the workspace does not need them).
package main
