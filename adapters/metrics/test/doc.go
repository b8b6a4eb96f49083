// Package metricstest holds the tests and benchmarks that the metrics
// adapters, adapters/prometheus (package promlimit) and adapters/otel
// (package otellimit), share: both export the same instruments from the
// same core.Tally, so one table of decisions and the series each must
// produce runs against each exporter, read back through the exporter's own
// pipeline (a Prometheus registry and the text exposition format, the
// OpenTelemetry SDK's manual reader). It is a module of its own, so that
// neither adapter's go.mod requires the other's dependencies.
//
// Each adapter keeps the tests of what is its own: the Prometheus scrape
// over HTTP and malformed sources, the OpenTelemetry units, late sources
// and Unregister, and each one's option errors.
//
// The package holds test files only, beside this documentation.
package metricstest
