// Package cluster says what a pgloop cluster is made of. Its builders turn a
// *v1.Postgresql into:
//   - the Kubernetes objects that run it: a StatefulSet of Spilo pods,
//     Services, Secrets, a PodDisruptionBudget and the RBAC Patroni needs;
//     the connection poolers' Deployments, Services and
//     PodDisruptionBudgets; zalando's logical backup CronJob
//     (logicalbackup.go);
//   - the part of Patroni's dynamic configuration the spec decides
//     (Dynamic);
//   - pgBackRest's configuration, as the Spilo container's environment, and
//     the archive_command that pushes the WAL with it (pgbackrest.go);
//   - the custom bootstrap that restores a clone from a repository
//     (RestoreCommand, restore.go);
//   - the shell programs that start the phases of a base backup run on the
//     primary, detached: the backup with its retention (BackupProgram),
//     pgBackRest's verify (VerifyProgram) and the restore drill
//     (DrillProgram), and the runs' schedules and retention
//     (basebackup.go).
//
// Its comparisons tell pkg/effects whether an existing object must be left
// alone, updated in place, or have its pods replaced; AdoptionRefusal tells
// it whether the objects a zalando cluster left under the same names can be
// taken over, and AdoptedSecret what pgloop's Secrets are then (adopt.go).
// It also holds the names, labels and annotations pgloop gives those
// objects, and those of Patroni's own objects it reads (the leader
// ConfigMap, or Endpoints: patroni.go), for every package that must find
// them.
//
// Everything here is pure: no API calls, no clock, no global state; it
// imports nothing of pgloop but pkg/apis, and no client, so a package that
// only needs a name links no write path. Besides the cluster, the builders
// take the operator's Options (image, default resources, logical backup
// settings and the like), which the effects and pkg/facts must be given
// alike, and the Secrets take a random source, which tests replace.
// Builders read the cluster and never modify it, and the objects they
// return share no memory with it, so a cluster taken from an informer's
// cache can be passed as it is. Output is deterministic: the same inputs
// always give byte-identical objects, whatever the order of Go's map
// iteration, which is what lets the pod template hash detect change.
//
// Builders assume a cluster that passed v1.Postgresql.Validate; they do not
// re-validate it, but they never panic on one that did not.
package cluster
