// Package operator runs pgloop against a Kubernetes API: it wires the
// clients, the informers, the effects, the per-cluster state machines and
// the event loop together, elects a leader among the operator's replicas,
// and serves health, readiness and Prometheus metrics. It also sets the
// client-side rate limit (ratelimit.go), stops the leader's work before its
// Lease may pass to another replica (fence.go), and keeps Go's soft memory
// limit under --memory-limit (memory.go).
//
// The transports that shape the operator's own API traffic (the request
// gate that puts users' actions first, the pacer, the write windows, the
// fence that refuses a leader's writes once its Lease may have passed) are
// pkg/traffic's: this package builds them from its flags, wires them into
// the clients and points their hooks at pkg/metrics.
//
// cmd/pgloop's `operator` command fills a Config from its flags and the
// PGLOOP_* environment variables ($KUBECONFIG as the kubeconfig's
// fallback), validates it, redirects klog (RedirectKlog) and calls Run.
// Run validates the Config again, for callers other than the command.
package operator
