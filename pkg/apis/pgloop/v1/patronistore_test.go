package v1

import "testing"

func TestValidatePatroniStore(t *testing.T) {
	const supported = `supported values: "configmaps", "endpoints"`
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"configmaps", nil},
		{"endpoints", nil},
		{"Endpoints", []string{`metadata.annotations[pgloop.dev/patroni-store]: Unsupported value: "Endpoints": ` + supported}},
		{"", []string{`metadata.annotations[pgloop.dev/patroni-store]: Unsupported value: "": ` + supported}},
		{"etcd", []string{`metadata.annotations[pgloop.dev/patroni-store]: Unsupported value: "etcd": ` + supported}},
	} {
		t.Run(tc.value, func(t *testing.T) {
			checkValidate(t, func(p *Postgresql) { p.Annotations = map[string]string{AnnotationPatroniStore: tc.value} }, tc.want)
		})
	}
}

func TestPatroniStore(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        PatroniStore
	}{
		{"unset", nil, PatroniStoreConfigMaps},
		{"configmaps", map[string]string{AnnotationPatroniStore: "configmaps"}, PatroniStoreConfigMaps},
		{"endpoints", map[string]string{AnnotationPatroniStore: "endpoints"}, PatroniStoreEndpoints},
		{"unknown, as it is", map[string]string{AnnotationPatroniStore: "etcd"}, PatroniStore("etcd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validCluster()
			p.Annotations = tc.annotations
			if got := p.PatroniStore(); got != tc.want {
				t.Errorf("PatroniStore() = %q, want %q", got, tc.want)
			}
		})
	}
}
