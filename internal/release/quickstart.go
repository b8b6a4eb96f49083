package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxRequests is how many requests or calls a quick start gets to deny one.
const maxRequests = 100

// redisModules are the stores whose quick starts get a redis-server.
var redisModules = []string{rootPath + "/adapters/goredis", rootPath + "/adapters/rueidis"}

// quickStart builds the README program q in a new module exactly as
// printed, runs it on a free loopback port (ADDR), with a redis-server of
// its own (REDIS_ADDR) when it imports a Redis store, and checks what its
// clients see.
func (c *consumers) quickStart(ctx context.Context, log io.Writer, q QuickStart) error {
	imports, err := Imports(q.Code)
	if err != nil {
		return fmt.Errorf("README.md:%d: %w", q.Line, err)
	}
	gets, err := c.modulesOf(imports)
	if err != nil {
		return err
	}
	d, err := c.env.consumerModule(ctx, c.dir, dirName("quickstart", q.Name))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "main.go"), []byte(q.Code), 0o644); err != nil {
		return err
	}
	if len(gets) > 0 {
		if _, err := c.env.run(ctx, d, append([]string{"get"}, gets...)...); err != nil {
			return err
		}
	}
	if _, err := c.env.run(ctx, d, "mod", "tidy"); err != nil {
		return err
	}
	bin := filepath.Join(d, "quickstart")
	if _, err := c.env.run(ctx, d, "build", "-trimpath", "-o", bin, "."); err != nil {
		return err
	}

	env := append([]string{}, c.env.env...)
	for _, p := range imports {
		if c.ws.ModuleOf(p) != nil && slices.Contains(redisModules, c.ws.ModuleOf(p).Path) {
			addr, stop, err := startRedis(ctx, d)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(log, "redis-server on %s\n", addr)
			env = append(env, "REDIS_ADDR="+addr)
			break
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	env = append(env, "ADDR="+addr)
	var output lockedBuffer
	cmd := exec.Command(bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = d, env, &output, &output
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill() // by its PID
		<-exited
	}()
	withOutput := func(err error) error {
		out := strings.TrimSpace(output.String())
		if out == "" {
			return fmt.Errorf("%w\n(it printed nothing)", err)
		}
		return fmt.Errorf("%w\nthe end of its output:\n%s", err, indent(tail(out, 8), "  "))
	}
	if err := waitListening(ctx, addr, exited, 60*time.Second); err != nil {
		return withOutput(err)
	}
	fmt.Fprintf(log, "listening on %s\n", addr)
	if q.GRPC() {
		err = probeGRPC(ctx, addr, q.Target)
	} else {
		err = probeHTTP(ctx, addr, q.Method, q.Target)
	}
	if err != nil {
		return withOutput(err)
	}
	return nil
}

// probeHTTP checks that the first request gets 200 and that a 429 with
// Retry-After and an application/problem+json body follows within
// maxRequests requests, every one before it getting 200.
func probeHTTP(ctx context.Context, addr, method, path string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + addr + path
	for i := 1; i <= maxRequests; i++ {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("request %d, %s %s: %w", i, method, url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			continue
		case resp.StatusCode == http.StatusTooManyRequests && i > 1:
			if resp.Header.Get("Retry-After") == "" {
				return fmt.Errorf("request %d: 429 without Retry-After", i)
			}
			ct := resp.Header.Get("Content-Type")
			if mt, _, _ := mime.ParseMediaType(ct); mt != "application/problem+json" {
				return fmt.Errorf("request %d: 429 with Content-Type %q, want application/problem+json", i, ct)
			}
			return nil
		default:
			return fmt.Errorf("request %d, %s %s: status %d, want 200 (then 429 within %d requests)", i, method, path, resp.StatusCode, maxRequests)
		}
	}
	return fmt.Errorf("%d requests to %s %s all got 200: no 429", maxRequests, method, path)
}

// gRPC status codes the probe tells apart.
const (
	grpcOK                = "0"
	grpcResourceExhausted = "8"
)

// probeGRPC checks that the first call of method (with an empty request
// message) succeeds and that a ResourceExhausted follows within
// maxRequests calls, every one before it succeeding. It speaks gRPC over
// unencrypted HTTP/2 with net/http, which is all a unary call with an
// empty message needs.
func probeGRPC(ctx context.Context, addr, method string) error {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	defer client.CloseIdleConnections()
	for i := 1; i <= maxRequests; i++ {
		code, msg, err := grpcCall(ctx, client, addr, method)
		if err != nil {
			return fmt.Errorf("call %d of %s: %w", i, method, err)
		}
		switch {
		case code == grpcOK:
			continue
		case code == grpcResourceExhausted && i > 1:
			return nil
		default:
			return fmt.Errorf("call %d of %s: grpc-status %s (%s), want 0 (then 8, ResourceExhausted, within %d calls)", i, method, code, msg, maxRequests)
		}
	}
	return fmt.Errorf("%d calls of %s all succeeded: no ResourceExhausted", maxRequests, method)
}

// grpcCall makes one unary call with an empty message (a 5-byte frame:
// uncompressed, length 0) and returns grpc-status and grpc-message, from
// the trailers, or from the headers of a Trailers-Only response.
func grpcCall(ctx context.Context, client *http.Client, addr, method string) (code, msg string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+method, bytes.NewReader(make([]byte, 5)))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	for _, h := range []http.Header{resp.Trailer, resp.Header} {
		if c := h.Get("Grpc-Status"); c != "" {
			return c, h.Get("Grpc-Message"), nil
		}
	}
	return "", "", errors.New("no grpc-status")
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until addr accepts a connection, the process ends
// (exited delivers) or the wait passes limit. It only connects: the probes
// count every request.
func waitListening(ctx context.Context, addr string, exited chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case err := <-exited:
			exited <- err // for the deferred Wait
			return fmt.Errorf("the program ended before it listened on %s: %v", addr, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listened on %s within %s", addr, limit)
		}
	}
}

// startRedis starts a redis-server on a free loopback port, with no
// persistence, and returns its address and a function that stops it by
// its PID.
func startRedis(ctx context.Context, dir string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (make deps installs it): %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	var output lockedBuffer
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	if err := waitListening(ctx, addr, exited, 20*time.Second); err != nil {
		stop()
		return "", nil, fmt.Errorf("redis-server: %w\n%s", err, tail(output.String(), 10))
	}
	return addr, stop, nil
}

// lockedBuffer is a bytes.Buffer that a process's output and a reader may
// share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
