// Package instance is pgloop's start-up program for its instance image,
// `pgloop instance` (docs/instance.md): it turns the environment pgloop
// gives a pod, the one zalando's Spilo image reads, into Patroni's
// configuration as Spilo's configure_spilo.py would for pgloop's image,
// makes PostgreSQL's certificate when the pod mounts none, and runs Patroni
// as a container's first process (pkg/supervise). The test plane's process
// kubelet runs every Patroni pod through it too, with flags for what
// differs outside a container (Machine).
package instance
