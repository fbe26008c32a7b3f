package v1

import "testing"

func TestValidateAdopt(t *testing.T) {
	checkValidate(t, func(p *Postgresql) { p.Annotations = map[string]string{AnnotationAdopt: AdoptZalando} }, nil)
	checkValidate(t, func(p *Postgresql) { p.Annotations = map[string]string{AnnotationAdopt: "true"} },
		[]string{`metadata.annotations[pgloop.dev/adopt]: Unsupported value: "true": supported values: "zalando"`})
}

func TestAdoptRequested(t *testing.T) {
	p := validCluster()
	if p.AdoptRequested() {
		t.Error("a cluster without the annotation asks for an adoption")
	}
	p.Annotations = map[string]string{AnnotationAdopt: AdoptZalando}
	if !p.AdoptRequested() {
		t.Error("a cluster with the annotation does not ask for an adoption")
	}
}
