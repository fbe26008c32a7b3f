// Package operator runs pgloop against a Kubernetes API: it wires the
// clients, the informers, the effects, the per-cluster state machines and
// the event loop together, elects a leader among the operator's replicas,
// and serves health, readiness and Prometheus metrics. It also shapes the
// operator's own API traffic: the rate limit (ratelimit.go), the gate that
// puts users' actions first (gate.go), and the fence that stops a leader's
// writes once its Lease may pass to another replica (fence.go).
//
// cmd/pgloop's `operator` command fills a Config from its flags and the
// PGLOOP_* environment variables ($KUBECONFIG as the kubeconfig's
// fallback), validates it, redirects klog (RedirectKlog) and calls Run.
// Run validates the Config again, for callers other than the command.
package operator
