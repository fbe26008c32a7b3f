package v1

import (
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ErrAdoptionRefused is wrapped by the errors that say why a cluster cannot
// be adopted (pkg/cluster.AdoptionRefusal); the state machine shows them
// with the reason AdoptionRefused. It lives in the API package, with
// AnnotationAdopt, because the state machine imports only the API types.
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
