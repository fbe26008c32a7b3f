package v1

import (
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Adoption of a cluster another operator made (docs/migrating.md, "Adopt in
// place").
const (
	// AnnotationAdopt on a Postgresql asks pgloop to take over, without
	// restarting a pod, the cluster the zalando postgres-operator made
	// under the same name in the same namespace: its StatefulSet, pods,
	// Services, PodDisruptionBudgets and the passwords of its credentials
	// Secrets. `pgloop convert --adopt` writes it with the value
	// AdoptZalando, the only one pgloop knows. Once the StatefulSet is
	// the Postgresql's, the annotation does nothing more.
	AnnotationAdopt = "pgloop.dev/adopt"
	// AdoptZalando is AnnotationAdopt's value for a zalando cluster.
	AdoptZalando = "zalando"
)

// ErrAdoptionRefused is wrapped by the errors that say why a cluster cannot
// be adopted (pkg/cluster.AdoptionRefusal); the state machine shows them
// with the reason AdoptionRefused. It lives here, with the annotation,
// because the state machine imports only the API types.
var ErrAdoptionRefused = errors.New("adoption refused")

// AdoptRequested reports whether the resource asks for an adoption
// (AnnotationAdopt set to AdoptZalando).
func (pg *Postgresql) AdoptRequested() bool {
	return pg.Annotations[AnnotationAdopt] == AdoptZalando
}

// validateAdopt refuses an AnnotationAdopt value pgloop does not know, so a
// typo is an error and not a new cluster created beside the one to adopt.
func (pg *Postgresql) validateAdopt() field.ErrorList {
	v, ok := pg.Annotations[AnnotationAdopt]
	if !ok || v == AdoptZalando {
		return nil
	}
	path := field.NewPath("metadata", "annotations").Key(AnnotationAdopt)
	return field.ErrorList{field.NotSupported(path, v, []string{AdoptZalando})}
}
