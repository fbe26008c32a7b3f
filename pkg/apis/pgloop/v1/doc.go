// Package v1 is version v1 of the pgloop.dev API: the Postgresql custom
// resource that describes one Patroni-managed PostgreSQL cluster.
//
// Spec field names follow the zalando postgres-operator's `postgresql`
// manifest so its users recognise them. The CRD under manifests/crds and
// zz_generated.deepcopy.go are generated from these types by controller-gen
// (`make generate`); `make verify` fails when they drift.
//
// +kubebuilder:object:generate=true
// +groupName=pgloop.dev
package v1
