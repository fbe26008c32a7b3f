// Package benchkit holds what the benchmarks on the local control plane
// share: the operator's process and its /metrics (Samples, Scraper,
// WaitQuiet), the bench's own watches of clusters, pods and StatefulSets
// (Tracker), one cluster's create → Running split at what the watches saw
// (Env.Probe), summaries of durations, and the results documents whose
// sections each run replaces (Doc).
package benchkit
