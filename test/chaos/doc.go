// Package chaos runs pgloop on the local control plane (test/testbed) under
// faults and checks that every user action still lands (issue 15, item 4;
// `make chaos`, figures in docs/reliability.md). Each scenario gets a fresh
// plane, a workload of clusters in a few namespaces (created, scaled,
// edited so their pods roll, deleted, new ones created: Plan), and faults
// on a schedule drawn from one seed:
//
//   - kill: the operator SIGKILLed at K random points, restarted each time;
//   - proxy: the operator reaches the apiserver through test/faultproxy,
//     which resets its connections, adds latency and blackholes it once;
//   - apiserver: the kube-apiserver restarted in the middle of the creates
//     and of a rollout of every cluster;
//   - leader: two replicas with leader election, the leader SIGKILLed
//     during rollouts, a new standby started each time.
//
// After the last fault it waits, on watches under one deadline, until every
// cluster that exists is Running for its current generation with its
// StatefulSet and pods as its spec says, and every deleted cluster is gone
// with its objects; then it counts duplicate or orphaned objects and lost
// user actions (Judge), and how long convergence took after the last fault.
package chaos
