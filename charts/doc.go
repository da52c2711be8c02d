// Package charts holds kgen's Helm chart, charts/kgen, and the tests that
// lint and render it with the helm binary hack/tools.sh builds from the Go
// module proxy. It has no Go code of its own.
package charts
