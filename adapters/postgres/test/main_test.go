package pglimit_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// shared is the server of the tests that do not stop theirs: each gets a
// database of its own on it (newDB).
var shared *pgtest.Server

func TestMain(m *testing.M) {
	srv, stop, err := pgtest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	stop()
	os.Exit(code)
}

var dbSeq atomic.Int64

// newDB creates a database on the shared server, migrated, and returns a
// pool on it, closed at the end of the test.
func newDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url, err := shared.CreateDatabase("t" + strconv.FormatInt(dbSeq.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	return openMigrated(t, url), url
}

// openMigrated opens a pool on url, closed at the end of the test, and
// migrates the database.
func openMigrated(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pglimit.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
