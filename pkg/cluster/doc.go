// Package cluster says what a pgloop cluster is made of. Its builders turn a
// *v1.Postgresql into the Kubernetes objects that run it (a StatefulSet of
// Spilo pods, Services, Secrets, a PodDisruptionBudget and the RBAC Patroni
// needs), and its comparisons tell pkg/effects whether an existing object
// must be left alone, updated in place, or have its pods replaced. It also
// holds the names, labels and annotations pgloop gives those objects, for
// every package that must find them.
//
// Everything here is pure: no API calls, no clock, no global state; it
// imports nothing of pgloop but pkg/apis, and no client, so a package that
// only needs a name links no write path. The only input besides the
// cluster is the random source of Secrets, which tests replace. Builders read the cluster and never modify it, and the
// objects they return share no memory with it, so a cluster taken from an
// informer's cache can be passed as it is. Output is deterministic: the same
// cluster always gives byte-identical objects, whatever the order of Go's
// map iteration, which is what lets the pod template hash detect change.
//
// Builders assume a cluster that passed v1.Postgresql.Validate; they do not
// re-validate it, but they never panic on one that did not.
package cluster
